"""``tracerl train run``: one round as a scheduler runs it (a real process, a real ``tracerl serve``), its JSON line and exit codes."""

from __future__ import annotations

import json

import httpx
import pytest
from typer.testing import CliRunner

from tracerl.cli import app
from tracerl.orchestration.rounds.lock import round_lock
from tracerl.orchestration.registry import PolicyRegistry
from tracerl.trainer.serving.app import running_server
from tracerl.trainer.training.checkpoint import read_checkpoint_manifest
from tracerl.core.net import free_port
from tracerl_testing.span_builders import episode_span, llm_call, reward_span, write_spans


def served_version(server) -> int:
    return httpx.get(f"{server.url}/health").json()["policy_version"]


def test_a_round_trains_on_the_new_episodes_publishes_and_records_then_waits_for_more(tmp_path, capture, round_config, tracerl, tiny_checkpoint):
    episodes = capture(6)
    config = round_config(min_episodes=4, endpoint=None)
    with running_server(tiny_checkpoint) as server:
        config = round_config(min_episodes=4, endpoint=server.base_url)
        done = tracerl("train", "run", "--config", str(config))
        assert done.returncode == 0, done.stderr
        assert done.summary["status"] == "trained" and done.summary["version"] == 1 and done.summary["parent"] == 0
        assert done.summary["episodes"] == 6 and done.summary["transitions"] == 18  # three calls per episode
        assert [p["policy_version"] for p in done.summary["published"]] == [1] and served_version(server) == 1
        assert set(done.summary["seconds"]) == {"build", "train", "checkpoint", "publish", "record"}  # report = false

        capture(2)
        idle = tracerl("train", "run", "--config", str(config))
    assert idle.returncode == 0 and idle.summary["status"] == "idle"
    assert idle.summary["reason"] == "2 new episode(s) since version 1, fewer than min_episodes 4"

    registry = PolicyRegistry(tmp_path / "state")
    base, trained = registry.entries()
    assert (base["version"], base["kind"], base["checkpoint"]) == (0, "base", str(tiny_checkpoint.resolve()))
    assert trained["kind"] == "trained" and trained["parent"] == 0
    assert [e["episode_id"] for e in trained["episodes"]] == episodes
    assert all(e["policy_versions"] == [1] for e in trained["episodes"])  # the span builders' calls say version 1
    assert trained["published"][0]["endpoint"] == server.base_url and trained["metrics"]["samples"] == 18
    manifest = read_checkpoint_manifest(trained["checkpoint"])
    assert manifest["policy_version"] == 1 and manifest["parent"] == str(tiny_checkpoint.resolve())
    assert manifest["dataset"]["path"] == trained["dataset"]["path"]
    (row,) = [json.loads(line) for line in (tmp_path / "state" / "metrics.jsonl").read_text().splitlines()]
    # the row type the local loop writes too, derived from the registry entry
    assert (row["round"], row["version"], row["policy_version"], row["status"], row["episodes"], row["samples"]) == (1, 1, 0, "trained", 6, 18)
    assert row["loss"] == trained["metrics"]["loss"] and row["trained_tokens"] > row["tokens"] and row["checkpoint_bytes"] > 0
    assert row["seconds"] == pytest.approx(sum(row[f"{phase}_seconds"] for phase in ("build", "train", "checkpoint", "publish")), abs=0.01)


def test_an_endpoint_that_is_down_exits_4_and_the_next_run_publishes_the_same_checkpoint(tmp_path, capture, round_config, tracerl, tiny_checkpoint):
    capture(4)
    down = tracerl("train", "run", "--config", str(round_config(endpoint=f"http://127.0.0.1:{free_port()}/v1")))
    assert down.returncode == 4 and down.summary["status"] == "publish_failed"
    assert "cannot reach tracerl serve" in down.summary["reason"]
    checkpoint = tmp_path / "state" / "policies" / "v0001"
    weights = (checkpoint / "model.safetensors").stat().st_mtime_ns
    assert [e["version"] for e in PolicyRegistry(tmp_path / "state").entries()] == [0]  # not recorded

    with running_server(tiny_checkpoint) as server:
        done = tracerl("train", "run", "--config", str(round_config(endpoint=server.base_url)))
        assert done.returncode == 0, done.stderr
        assert done.summary["resumed"] == "publish" and "train" not in done.summary["seconds"]
        assert served_version(server) == 1
    assert (checkpoint / "model.safetensors").stat().st_mtime_ns == weights  # published as trained, not trained again
    assert PolicyRegistry(tmp_path / "state").latest()["episodes"].__len__() == 4


def test_a_round_with_nothing_trainable_is_set_aside_and_the_next_trains_on_new_episodes(tmp_path, data_dir, capture, round_config, tracerl, tiny_checkpoint):
    """Calls with empty responses (a model that answered nothing) give a dataset with no usable row:
    the round exits 0 as "skipped", publishes nothing, makes no version, records why (registry,
    metrics.jsonl, the report) and never blocks the schedule: the next run trains on new episodes only."""
    write_spans(data_dir, [row for i in range(4) for row in (
        episode_span(f"empty-{i}", 0, 1000, task="t"), llm_call(f"empty-{i}", "c1", 10, 20, [1, 2], [], logprobs=[]),
        reward_span(f"empty-{i}", "r", 70, float(i % 2)),
    )])
    with running_server(tiny_checkpoint) as server:
        config = round_config(min_episodes=4, endpoint=server.base_url)
        skipped = tracerl("train", "run", "--config", str(config))
        assert skipped.returncode == 0, skipped.stderr
        assert skipped.summary["status"] == "skipped" and "holds no usable transition" in skipped.summary["reason"]
        assert "'empty response': 4" in skipped.summary["reason"] and served_version(server) == 0
        registry = PolicyRegistry(tmp_path / "state")
        assert [e["version"] for e in registry.entries()] == [0] and registry.skipped()[0]["episodes"] == 4

        fresh = capture(4)
        trained = tracerl("train", "run", "--config", str(config))
        assert trained.summary["status"] == "trained" and trained.summary["version"] == 1, trained.stderr
        assert served_version(server) == 1
    assert [e["episode_id"] for e in PolicyRegistry(tmp_path / "state").latest()["episodes"]] == fresh
    rows = [json.loads(line) for line in (tmp_path / "state" / "metrics.jsonl").read_text().splitlines()]
    assert [(r["round"], r["status"], r.get("set_aside", False)) for r in rows] == [(1, "trained", False), (1, "skipped", True)]
    assert rows[1]["episodes"] == 4 and "empty response" in rows[1]["reason"]

    report = tmp_path / "report.html"
    shown = tracerl("report", str(data_dir), "--runs", str(tmp_path / "state"), "--out", str(report))
    assert shown.returncode == 0, shown.stderr
    assert "1 round(s) set aside, no version made" in report.read_text() and "empty response" in report.read_text()


def test_old_versions_lose_their_weights_unless_served_or_pinned_and_cannot_be_rolled_back_to(tmp_path, capture, round_config, tracerl, tiny_checkpoint):
    """keep_checkpoints = 1: after three rounds only the newest version and the pinned one keep their
    weights (the others keep config and manifest); rolling back to a pruned one says what to do."""
    state = tmp_path / "state"
    runner = CliRunner()
    with running_server(tiny_checkpoint) as server:
        config = round_config(min_episodes=2, keep_checkpoints=1, endpoint=server.base_url)
        capture(2)
        assert tracerl("train", "run", "--config", str(config)).summary["version"] == 1
        pinned = runner.invoke(app, ["policy", "pin", "1", "--state", str(state)])
        assert pinned.exit_code == 0 and json.loads(pinned.stdout)["status"] == "pinned"
        for version in (2, 3):
            capture(2)
            assert tracerl("train", "run", "--config", str(config)).summary["version"] == version
    weights = {v: (state / "policies" / f"v{v:04d}" / "model.safetensors").exists() for v in (1, 2, 3)}
    assert weights == {1: True, 2: False, 3: True}
    assert (state / "policies" / "v0002" / "tracerl_checkpoint.json").exists()  # what it was stays readable
    listed = runner.invoke(app, ["policy", "list", "--state", str(state)]).stdout.splitlines()
    assert [line.split()[5] for line in listed[1:]] == ["kept", "pinned", "pruned", "kept"]

    refused = runner.invoke(app, ["policy", "rollback", "2", "--state", str(state)])
    assert refused.exit_code == 2
    reason = json.loads(refused.stdout.strip().splitlines()[-1])["reason"]
    assert "had its weights deleted" in reason and "tracerl policy pin V" in reason
    assert [e["version"] for e in PolicyRegistry(state).entries()] == [0, 1, 2, 3]  # nothing recorded


def test_a_second_round_while_one_runs_exits_3(tmp_path, capture, round_config, tracerl):
    capture(2)
    config = round_config()
    with round_lock(tmp_path / "state"):
        done = tracerl("train", "run", "--config", str(config))
    assert done.returncode == 3 and done.summary["status"] == "locked"
    assert "another round holds" in done.summary["reason"] and "lock" in done.summary["reason"]


def test_a_bad_config_exits_2_naming_the_key(tmp_path, round_config):
    config = round_config(min_episodes=4)
    config.write_text(config.read_text() + "\n[build]\nsplit = 'train'\n")
    result = CliRunner().invoke(app, ["train", "run", "--config", str(config)])
    assert result.exit_code == 2
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["status"] == "config_error" and "[build]: unknown key(s) split" in summary["reason"] and "splits" in summary["reason"]


def test_rollback_serves_an_older_checkpoint_as_a_new_version_and_list_shows_it(tmp_path, round_config, tiny_checkpoint):
    config = round_config()
    state = tmp_path / "state"
    runner = CliRunner()
    from tracerl.orchestration.rounds.config import load_config
    from tracerl.orchestration.rounds.round import ensure_base

    ensure_base(PolicyRegistry(state), load_config(config))
    with running_server(tiny_checkpoint) as server:
        result = runner.invoke(app, ["policy", "rollback", "0", "--state", str(state), "--endpoint", server.base_url])
        assert result.exit_code == 0, result.output
        assert served_version(server) == 1
    entry = json.loads(result.stdout.strip().splitlines()[-1])
    assert (entry["status"], entry["version"], entry["kind"], entry["parent"]) == ("rolled_back", 1, "rollback", 0)
    rolled = state / "policies" / "v0001"
    assert (rolled / "model.safetensors").read_bytes() == (tiny_checkpoint / "model.safetensors").read_bytes()
    assert read_checkpoint_manifest(rolled)["policy_version"] == 1

    listed = runner.invoke(app, ["policy", "list", "--state", str(state)]).stdout.splitlines()
    assert listed[1].split()[:3] == ["0", "base", "-"] and listed[2].split()[:3] == ["1", "rollback", "0"]
    shown = json.loads(runner.invoke(app, ["policy", "show", "1", "--config", str(config)]).stdout)
    assert shown["published"][0]["endpoint"] == server.base_url
    missing = runner.invoke(app, ["policy", "show", "7", "--state", str(state)])
    assert missing.exit_code == 2 and "no policy version 7" in missing.output


def test_the_report_after_a_round_takes_its_figures_from_the_round_s_build(tmp_path, capture, round_config, tiny_checkpoint, monkeypatch):
    """The round's build analyzed every span already: the report is drawn from that analysis, never a second
    one (the report's own ``analyze`` would fail here), and shows what ``tracerl report`` shows of the spans."""
    from tracerl.orchestration.rounds.config import load_config
    from tracerl.orchestration.rounds.round import run_round
    from tracerl.pipeline import report

    capture(4)
    with running_server(tiny_checkpoint) as server:
        config = load_config(round_config(min_episodes=4, endpoint=server.base_url), report=True, state=tmp_path / "state")
        standalone = report.report_data(config.spans, runs=None, options=config.build)

        def analyzed_again(*args, **kwargs):
            raise AssertionError("the report analyzed the spans a second time")

        monkeypatch.setattr(report, "analyze", analyzed_again)
        summary = run_round(config)
    assert summary.status == "trained" and "report" in summary.seconds
    page = (tmp_path / "state" / "report.html").read_text()
    for row in standalone["agents"]:
        assert f">{row['agent']}<" in page
    assert str(standalone["doctor"]["funnel"][0][1]) in page
