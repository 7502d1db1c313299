"""The whole loop, end to end: agent under `tracerl run` -> spans -> dataset -> training -> refreshed server."""

from __future__ import annotations

import json

import pytest

from tracerl.orchestration.demo.recipe import DEMO
from tracerl.orchestration.local.config import LocalConfig
from tracerl.orchestration.local.run import run_local
from tracerl.orchestration.registry import PolicyRegistry
from tracerl.orchestration.round_record import metrics_row
from tracerl.trainer.tiny_model import build_tiny_model
from tracerl.trainer.training.checkpoint import read_checkpoint_manifest
from tracerl.trainer.training.config import TrainConfig


@pytest.mark.slow
def test_short_loop_trains_and_refreshes_the_endpoint(tmp_path):
    start = build_tiny_model(tmp_path / "start", seed=1)  # untrained: the loop must still run cleanly
    cfg = LocalConfig(
        out=tmp_path / "run", rounds=1, tasks_per_round=4, group_size=2, eval_tasks=3, seed=0,
        model=str(start), train=TrainConfig(epochs=1, minibatch_size=8),
    )
    phases = []
    rows = run_local(DEMO, cfg, on_phase=lambda rnd, text: phases.append((rnd, text)))

    lines = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert lines == rows and [r["round"] for r in rows] == [0, 1]
    assert [r["policy_version"] for r in rows] == [0, 1]
    for row in rows:
        assert 0.0 <= row["train_mean_reward"] <= 1.0 and 0.0 <= row["eval_mean_reward"] <= 1.0
        # one transition per LLM call: 2 calls per episode, training episodes only
        assert row["transitions"] == 4 * 2 * 2
        assert row["generated_tokens"] > 0
    assert rows[0]["loss"] is not None and "loss" not in rows[1]  # the last round evaluates only
    assert rows[0]["trained_tokens"] > rows[0]["transitions"]  # prompts and responses, every sample
    # the row type a scheduled round writes: its training fields derived from the registry entry of the version made
    registry = PolicyRegistry(tmp_path / "run" / "policy")
    trained = registry.get(1)
    derived = {k: v for k, v in metrics_row(trained).items() if not k.endswith("seconds")}  # the clock times the record after it
    assert {k: rows[0][k] for k in derived} == derived
    assert (rows[0]["version"], rows[0]["status"], rows[0]["episodes"]) == (1, "trained", 4 * 2)
    assert rows[0]["seconds"] == pytest.approx(sum(v for k, v in rows[0].items() if k.endswith("_seconds")), abs=0.01)  # one clock
    assert {"rollout", "build", "train", "checkpoint", "publish"} <= set(trained["seconds"])
    manifest = read_checkpoint_manifest(tmp_path / "run" / "policy" / "v1")  # the manifest `tracerl train` writes
    assert (manifest["parent_version"], manifest["policy_version"], manifest["metrics"]["loss"]) == (0, 1, rows[0]["loss"])
    # the trainer starts from the weights that sampled round 0: its log-probs are the served ones
    assert rows[0]["served_logprob_gap"] < 1e-3
    assert (tmp_path / "run" / "policy" / "v1" / "config.json").exists()
    assert (tmp_path / "run" / "reward_curve.png").stat().st_size > 1000
    assert (0, "running the agent") in phases and (0, "training") in phases


@pytest.mark.slow
def test_with_a_judge_each_round_trains_on_the_judges_scores_alone(tmp_path):
    """--judge-url: the round's training episodes are judged in its data dir and the build weighs only
    those scores; the agent's own rewards still give the round's means."""
    import pyarrow.parquet as pq

    from tracerl_testing.judges import scripted_judge
    from tracerl_testing.scripted_server import running_scripted_server

    start = build_tiny_model(tmp_path / "start", seed=1)
    with running_scripted_server(scripted_judge(lambda context, text: round(len(text) % 5 / 4, 2))) as judge:
        cfg = LocalConfig(
            out=tmp_path / "run", rounds=1, tasks_per_round=4, group_size=2, eval_tasks=2, seed=0,
            model=str(start), train=TrainConfig(epochs=1, minibatch_size=8), air=False, judge_url=judge.base_url, judge_model="j",
        )
        rows = run_local(DEMO, cfg)
        asked = len(judge.calls)
    assert [(r["judged"], r["judge_failed"]) for r in rows] == [(8, 0), (8, 0)] and asked == 8  # 4 groups of 2 a round
    round_dir = tmp_path / "run" / "rounds" / "000"
    scores = {r["episode_id"]: r["value"] for r in pq.read_table(round_dir / "data" / "rewards" / "judge.parquet").to_pylist()}
    returns = {r["episode_id"]: r["return"] for r in pq.read_table(round_dir / "dataset").to_pylist()}
    assert returns == scores  # identical credit: every call's return is its episode's judge score
    assert 0.0 <= rows[0]["train_mean_reward"] <= 1.0  # the agent's own reward, still measured


@pytest.mark.slow
def test_a_round_with_nothing_to_train_on_is_recorded_as_skipped_as_a_scheduled_round_records_it(tmp_path):
    """A judge that scores every episode alike leaves every group's advantage 0; with --drop-zero-advantage no
    sample is left: the policy's registry records the round as skipped, the row says why, no version is made."""
    from tracerl_testing.judges import scripted_judge
    from tracerl_testing.scripted_server import running_scripted_server

    start = build_tiny_model(tmp_path / "start", seed=1)
    with running_scripted_server(scripted_judge(lambda context, text: 0.5)) as judge:
        cfg = LocalConfig(
            out=tmp_path / "run", rounds=1, tasks_per_round=2, group_size=2, eval_tasks=2, seed=0, model=str(start),
            train=TrainConfig(epochs=1, minibatch_size=8), air=False, judge_url=judge.base_url, judge_model="j", drop_zero_advantage=True,
        )
        rows = run_local(DEMO, cfg)
    assert rows[0]["status"] == "skipped" and "advantage 0" in rows[0]["reason"] and "version" not in rows[0]
    registry = PolicyRegistry(tmp_path / "run" / "policy")
    (record,) = registry.skipped()
    assert (record["round"], record["episodes"], record["reason"]) == (0, rows[0]["episodes"], rows[0]["reason"]) and record["episodes"] == 2 * 2
    assert [e["version"] for e in registry.entries()] == [0] and rows[1]["policy_version"] == 0  # still the start


def test_an_out_folder_holding_an_earlier_run_is_refused_before_anything_is_overwritten(tmp_path):
    from tracerl.orchestration.local.run import LocalSetupError

    (tmp_path / "run" / "policy").mkdir(parents=True)
    (tmp_path / "run" / "policy" / "registry.json").write_text("[]")
    (tmp_path / "run" / "metrics.jsonl").write_text('{"round": 0}\n')
    with pytest.raises(LocalSetupError, match=r"holds an earlier run .*give --out another folder, or delete"):
        run_local(DEMO, LocalConfig(out=tmp_path / "run", rounds=0))
    assert (tmp_path / "run" / "metrics.jsonl").read_text() == '{"round": 0}\n'  # the earlier run's rows are still there
