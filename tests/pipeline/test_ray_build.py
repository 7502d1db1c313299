"""``build-dataset --engine ray`` builds the dataset one process builds, on a local Ray of 2 CPUs.

Equal means: the same transitions (ids, tokens, rewards; returns and advantages to 1e-9, the
last bits of a float sum depending on the order DuckDB's threads add in), the same counts, the
same watermark and warnings. The inputs are chosen to cross buckets wherever a build could: task
groups over many traces, an episode over two traces, a call's gateway copy in another trace,
late rewards keyed four ways and one naming nothing, log records and judgments, an episode still
running and one gone stale on the data's clock, agentlightning's rollouts, and a million spans
with late rewards in groups of 8, the last built while a bucket's worker is killed.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from tracerl.core.storage import write_parquet_atomic
from tracerl.pipeline import build_dataset, dataset_table
from tracerl.pipeline.source import PipelineInputError
from tracerl.schemas import attributes as A
from tracerl.schemas import environment as E
from tracerl.schemas import spans_table
from tracerl.schemas.logs import log_row, logs_table
from tracerl_testing.installed import require_module
from tracerl_testing.span_builders import chat_episode, episode_span, llm_call, reward_span, span, trace_of, write_spans
from tracerl_testing.synthetic_spans import episode_id, generate, write

AGENTLIGHTNING = Path(__file__).parent / "fixtures" / "agentlightning"
FLOATS = ("reward", "return", "advantage")

ray = require_module("ray", "pip install -e '.[ray]'")


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    os.environ.setdefault(E.RAY_ACCEL_OVERRIDE_ENV, "0")  # what build_dataset_on_ray sets: Ray's next default
    # the workers' credentials for the S3 test's moto server (a cluster's nodes have their own)
    credentials = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_EC2_METADATA_DISABLED": "true"}
    ray.init(runtime_env={"env_vars": credentials}, num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def build_both(spans, tmp_path: Path, buckets: int = 3, **options) -> tuple[dict, dict]:
    """The one-process build and the Ray build of ``spans``: their manifests (the datasets in tmp_path/one, /ray)."""
    from tracerl.pipeline.ray_build import build_dataset_on_ray

    one = build_dataset(spans, tmp_path / "one", **options)
    on_ray = build_dataset_on_ray(spans, tmp_path / "ray", buckets_count=buckets, **options)
    return one, on_ray


def assert_same_dataset(tmp_path: Path, one: dict, on_ray: dict) -> None:
    a, b = dataset_table(tmp_path / "one"), dataset_table(tmp_path / "ray")
    assert a.num_rows == b.num_rows > 0
    for name in a.column_names:
        if name in FLOATS:
            assert a[name].is_null().equals(b[name].is_null()), name
            assert (pc.max(pc.abs(pc.subtract(a[name], b[name]))).as_py() or 0.0) <= 1e-9, name
        else:
            assert a[name].equals(b[name]), name
    assert on_ray["counts"] == one["counts"]
    assert on_ray["watermark"] == one["watermark"]
    assert on_ray["warnings"] == one["warnings"]
    assert on_ray["inputs"] == one["inputs"]


def edge_cases(data: Path) -> Path:
    """Spans, late rewards, log records and judgments that would each go wrong if a bucket split them."""
    rows = []
    for n in range(6):  # one task group of six episodes, each in its own trace
        rows += chat_episode(f"g{n}", task="shared", reward=n / 5)
    # an episode over two traces: the second trace's call names the same episode
    rows += [episode_span("split", 0, 900, task="alone"), llm_call("split", "a1", 10, 20, [1], [2], response_id="resp-split"),
             llm_call("split", "a2", 30, 40, [1, 2, 3], [4], trace=trace_of("split-other"), parent=None),
             reward_span("split", "r", 50, 1.0)]
    # a gateway's copy of a call, in a trace of its own, sharing the call's response id
    rows += [episode_span("gw", 0, 900, task="gateway"), llm_call("gw", "c1", 10, 20, [5], [6], response_id="resp-gw"),
             llm_call("gw-copy", "c1", 11, 19, [5], [6], response_id="resp-gw", baggage=False, parent=None,
                      trace=trace_of("gateway-trace")),
             reward_span("gw", "r", 30, 1.0)]
    # still running (no episode span) at the data's clock, and long gone stale
    rows += [llm_call("running", "c1", 10**10, 10**10 + 5, [1], [2], task="late")]
    rows += [llm_call("stale", "c1", 10, 20, [1], [2], task="late")]
    rows += [span("clock", "root", "anything", 10**10, 10**10 + 10, parent=None)]
    write_spans(data, rows[: len(rows) // 2])
    write_spans(data, rows[len(rows) // 2:] + rows[:3])  # a few spans delivered twice, in another file
    (data.parent / "late.jsonl").write_text("\n".join(json.dumps(r) for r in [
        {"episode_id": "g1", "name": "user", "value": 0.5},
        {"trace_id": trace_of("g2"), "name": "user", "value": -0.5},
        {"response_id": "resp-split", "name": "user", "value": 0.25},
        {"episode_id": "nobody", "name": "user", "value": 1.0},  # names no episode: counted once, unmatched
    ]) + "\n")
    details = A.GEN_AI_OPERATION_DETAILS_EVENT
    write_parquet_atomic(logs_table([
        log_row(trace_id=trace_of("g3"), span_id="c3".ljust(16, "0"), time_unix_nano=1, observed_time_unix_nano=1,
                severity_number=9, severity_text="INFO", event_name=details, body=None, attributes={}),
        log_row(trace_id="f" * 32, span_id="e" * 16, time_unix_nano=1, observed_time_unix_nano=1,
                severity_number=9, severity_text="INFO", event_name=details, body=None, attributes={}),  # its span never came
    ]), data / "logs", prefix="logs", partition="date=2026-01-01/hour=00")
    (data / "judgments").mkdir()
    (data / "judgments" / "j.jsonl").write_text("\n".join(json.dumps(
        {"kind": "episode", "episode_id": e, "task_id": "shared", "judge_model": "j", "rubric_sha256": "r",
         "status": "scored", "reason": None, "score": 0.5, "unix": 1.0}) for e in ("g0", "g4", "unknown")) + "\n")
    return data


def test_edge_cases_across_buckets_build_the_same_dataset(tmp_path):
    data = edge_cases(tmp_path / "data")
    one, on_ray = build_both(data, tmp_path, buckets=4, rewards=(str(tmp_path / "late.jsonl"),), episode_timeout_s=1.0)
    assert_same_dataset(tmp_path, one, on_ray)
    counts = one["counts"]
    # the inputs really did cross: a group of six, late rewards and one naming nothing, a copy merged,
    # a pending episode, log records with and without their span, judgments of known and unknown episodes
    assert counts["task_groups"] == {"total": 3, "single_episode": 2, "single_episode_transitions": 3}
    assert counts["rewards"]["by_source"]["late"] == 4 and counts["rewards"]["unmatched_episode"] == 1
    assert counts["llm_calls"]["merged_duplicates"] == 1 and counts["episodes"]["pending"] == 1
    assert counts["logs"]["content_records"] == 2 and counts["logs"]["span_missing"] == 1
    assert counts["judgments"]["by_status"] == {"scored": 3}
    assert on_ray["engine"]["name"] == "ray" and on_ray["engine"]["buckets"] == 4
    assert sum(on_ray["engine"]["spans_per_bucket"]) == counts["spans"]["rows"]


@pytest.mark.slow  # runs the demo's rounds first
def test_the_demos_rounds_build_the_same_dataset(tmp_path):
    from dataclasses import replace

    from tracerl.orchestration.demo.recipe import DEMO
    from tracerl.orchestration.local.run import run_local

    run_local(DEMO, replace(DEMO.defaults, out=tmp_path / "demo", rounds=1, tasks_per_round=8, eval_tasks=8))
    for round_dir in sorted((tmp_path / "demo" / "rounds").iterdir()):  # round 0's data, and round 1's after a training step
        one, on_ray = build_both(round_dir / "data", tmp_path / round_dir.name, buckets=3)
        assert_same_dataset(tmp_path / round_dir.name, one, on_ray)


def test_agentlightning_rollouts_build_the_same_dataset(tmp_path):
    one, on_ray = build_both(AGENTLIGHTNING, tmp_path, rewards=(str(AGENTLIGHTNING / "store_rewards.jsonl"),))
    assert_same_dataset(tmp_path, one, on_ray)


def test_incremental_trajectory_and_rloo_build_the_same_dataset(tmp_path):
    data = tmp_path / "data"
    write_spans(data, [row for n in range(8) for row in chat_episode(f"e{n}", task=f"t{n % 2}", reward=n % 3)])
    build_both(data, tmp_path, advantage="rloo", trajectory=True)
    write_spans(data, [row for n in range(8, 12) for row in chat_episode(f"e{n}", task=f"t{n % 2}", reward=1.0)])
    one, on_ray = build_both(data, tmp_path, advantage="rloo", trajectory=True, incremental=True)
    assert one["counts"]["episodes"]["already_processed"] == 8
    assert_same_dataset(tmp_path, one, on_ray)


def test_spans_on_s3_build_the_same_dataset(s3, tmp_path):
    store = f"s3://traces/prod?endpoint_override={s3.removeprefix('http://')}&scheme=http&region=us-east-1"
    path, _, query = store.partition("?")
    for hour in range(3):  # three collectors' hours, each a file
        rows = [row for n in range(4) for row in chat_episode(f"h{hour}-e{n}", task=f"h{hour}-t{n % 2}", reward=n / 3)]
        write_parquet_atomic(spans_table(rows), f"{path}/spans?{query}", prefix="spans", partition=f"date=2026-01-01/hour={hour:02d}")
    one, on_ray = build_both(store, tmp_path, buckets=2)
    assert_same_dataset(tmp_path, one, on_ray)
    # six task groups, two an hour, cut in file order: each bucket reads two of the three files
    assert on_ray["engine"]["span_files_per_bucket"] == [2, 2]


def test_a_file_with_bad_data_fails_clearly_and_keeps_the_old_dataset(tmp_path):
    from tracerl.pipeline.ray_build import build_dataset_on_ray

    data = tmp_path / "data"
    write_spans(data, [row for n in range(4) for row in chat_episode(f"e{n}", reward=n % 2)])
    build_dataset_on_ray(data, tmp_path / "out", buckets_count=2)
    before = dataset_table(tmp_path / "out")
    write_spans(data, chat_episode("late-file"))
    path = max((data / "spans").rglob("*.parquet"), key=lambda p: p.stat().st_mtime_ns)
    raw = bytearray(path.read_bytes())
    footer = int.from_bytes(raw[-8:-4], "little") + 8
    raw[4:len(raw) - footer] = b"\xff" * (len(raw) - footer - 4)  # every page damaged, footer intact
    path.write_bytes(bytes(raw))
    with pytest.raises(PipelineInputError, match="reading the span files failed"):
        build_dataset_on_ray(data, tmp_path / "out", buckets_count=2)
    assert dataset_table(tmp_path / "out").equals(before)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "out"]  # no staging folder left


def test_a_batch_baseline_is_refused_naming_what_to_do_instead(tmp_path):
    from tracerl.pipeline.ray_build import build_dataset_on_ray

    write_spans(tmp_path / "data", chat_episode("e"))
    with pytest.raises(PipelineInputError, match="--engine duckdb"):
        build_dataset_on_ray(tmp_path / "data", tmp_path / "out", advantage="batch")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_the_cli_builds_on_ray_and_refuses_ray_options_without_it(tmp_path):
    from typer.testing import CliRunner

    from tracerl.pipeline.cli import app

    write_spans(tmp_path / "data", [row for n in range(4) for row in chat_episode(f"e{n}", reward=n % 2)])
    result = CliRunner().invoke(app, ["build-dataset", "--spans", str(tmp_path / "data"), "--out", str(tmp_path / "out"),
                                      "--engine", "ray", "--buckets", "2"])
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "out" / A.DATASET_MANIFEST_FILE).read_text())["engine"]["buckets"] == 2
    result = CliRunner().invoke(app, ["build-dataset", "--spans", str(tmp_path / "data"), "--out", str(tmp_path / "o2"), "--buckets", "2"])
    assert result.exit_code == 2 and "--engine ray" in result.output


def _kill_a_bucket_worker(stop: threading.Event, killed: list[int]) -> None:
    """SIGKILL the first Ray worker seen running a bucket's build (Ray names the process after its task)."""
    import psutil

    while not stop.is_set() and not killed:
        for process in psutil.process_iter(["pid", "cmdline"]):
            if "ray::_build_bucket" in " ".join(process.info["cmdline"] or []):
                time.sleep(1.0)  # into its work: reading, normalising, writing
                os.kill(process.info["pid"], signal.SIGKILL)
                killed.append(process.info["pid"])
                return
        time.sleep(0.05)


@pytest.mark.slow  # six minutes on 2 cores: the slow tier
@pytest.mark.timeout(900)
def test_a_million_spans_with_a_worker_killed_mid_build_give_the_same_dataset_once(tmp_path):
    episodes = 100_000
    data = write(generate(episodes, group_size=8), tmp_path / "data")
    rewards = data / "rewards"
    rewards.mkdir()
    late = [episode_id(n) for n in range(0, episodes, 10)]  # every tenth episode: a late reward too
    write_parquet_atomic(pa.table({"episode_id": late, "name": ["user"] * len(late), "value": [0.5] * len(late)}),
                         rewards, prefix="late")
    from tracerl.pipeline.ray_build import build_dataset_on_ray

    options = {"reward_weights": {"correct": 1.0, "user": 1.0}, "threads": 2}
    one = build_dataset(data, tmp_path / "one", **options)
    stop, killed = threading.Event(), []
    killer = threading.Thread(target=_kill_a_bucket_worker, args=(stop, killed))
    killer.start()
    try:
        on_ray = build_dataset_on_ray(data, tmp_path / "ray", buckets_count=2, **options)
    finally:
        stop.set()
        killer.join()
    assert killed, "no bucket's worker was seen to kill"
    assert_same_dataset(tmp_path, one, on_ray)
    assert one["counts"]["rows_written"] == 400_000 and one["counts"]["rewards"]["by_source"]["late"] == len(late)
    # nothing written twice, nothing left beside the dataset
    assert len(set(dataset_table(tmp_path / "ray")["span_id"].to_pylist())) == 400_000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "one", "ray"]
