"""Rewards from spans, events and late files; attached by time; weighted by name; episodes held back."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from tracerl.pipeline import PipelineInputError, build_dataset, dataset_table
from tracerl.schemas import REWARDS_SCHEMA
from tracerl.schemas import attributes as A
from tracerl.core.storage import write_parquet_atomic
from tracerl_testing.span_builders import episode_span, llm_call, reward_span, span, trace_of, write_spans


def _three_calls(ep: str, task: str = "t") -> list[dict]:
    return [
        episode_span(ep, 0, 1000, task=task),
        llm_call(ep, "c0", 10, 20, [1], [2], response_id=f"{ep}-r0"),
        llm_call(ep, "c1", 30, 40, [1, 2, 3], [4], response_id=f"{ep}-r1"),
        llm_call(ep, "c2", 50, 60, [1, 2, 3, 4, 5], [6], response_id=f"{ep}-r2"),
    ]


def _rewards(out) -> list[float]:
    return [r["reward"] for r in dataset_table(out).to_pylist()]


def test_reward_events_attach_to_the_last_call_that_ended_before_them(data_dir, tmp_path):
    events = [
        {"name": A.REWARD_EVENT_NAME, "time_unix_nano": 45_000, "attributes": {A.REWARD_VALUE: 0.25}},  # after c1
        {"name": A.REWARD_EVENT_NAME, "time_unix_nano": 5_000, "attributes": {A.REWARD_VALUE: 0.5}},  # before any call: c0
        {"name": "other", "time_unix_nano": 46_000, "attributes": {A.REWARD_VALUE: 9.0}},
    ]
    rows = _three_calls("e1") + [span("e1", "agent", "agent", 1, 999, events=events), reward_span("e1", "r", 100, 1.0)]
    write_spans(data_dir, rows)
    manifest = build_dataset(data_dir, tmp_path / "out", advantage="none")
    assert _rewards(tmp_path / "out") == [0.5, 0.25, 1.0]
    assert [r["return"] for r in dataset_table(tmp_path / "out").to_pylist()] == [1.75] * 3
    assert manifest["counts"]["rewards"]["by_source"] == {"event": 2, "span": 1}


def test_late_rewards_by_episode_trace_and_response_id_from_files(data_dir, tmp_path):
    write_spans(data_dir, _three_calls("e1") + _three_calls("e2") + _three_calls("e3"))
    (tmp_path / "by_episode.csv").write_text("episode_id,value,name\ne1,1.0,user\nnope,1.0,user\n")
    (tmp_path / "by_response.jsonl").write_text(json.dumps({"response_id": "e2-r1", "value": 0.5}) + "\n")
    # the data dir's rewards/ folder (REWARDS_SCHEMA) is read without being named
    late = pa.Table.from_pylist([{"trace_id": trace_of("e3"), "value": 2.0, "name": "tests"}], schema=REWARDS_SCHEMA)
    write_parquet_atomic(late, data_dir / "rewards", prefix="rewards")
    manifest = build_dataset(data_dir, tmp_path / "out", advantage="none",
                             rewards=(str(tmp_path / "by_episode.csv"), str(tmp_path / "by_response.jsonl")))
    by_episode = {}
    for row in dataset_table(tmp_path / "out").to_pylist():
        by_episode.setdefault(row["episode_id"], []).append(row["reward"])
    assert by_episode == {"e1": [0.0, 0.0, 1.0], "e2": [0.0, 0.5, 0.0], "e3": [0.0, 0.0, 2.0]}
    assert manifest["counts"]["rewards"]["unmatched_episode"] == 1
    assert any("not found in the spans" in w for w in manifest["warnings"])


def test_weighted_combination_of_named_rewards(data_dir, tmp_path):
    rows = _three_calls("e1") + [reward_span("e1", "ra", 100, 1.0, "correctness"), reward_span("e1", "rb", 101, 0.5, "format"),
                                 reward_span("e1", "rc", 102, 7.0, "length")]
    write_spans(data_dir, rows)
    manifest = build_dataset(data_dir, tmp_path / "out", advantage="none",
                             reward_weights={"correctness": 0.9, "format": 0.1})
    assert _rewards(tmp_path / "out") == [0.0, 0.0, pytest.approx(0.9 * 1.0 + 0.1 * 0.5)]
    assert manifest["counts"]["rewards"]["ignored_by_weights"] == 1


def test_a_rewards_file_without_a_key_column_is_a_clear_error(data_dir, tmp_path):
    write_spans(data_dir, _three_calls("e1"))
    (tmp_path / "bad.csv").write_text("who,value\ne1,1\n")
    with pytest.raises(PipelineInputError, match="needs one key column"):
        build_dataset(data_dir, tmp_path / "out", rewards=(str(tmp_path / "bad.csv"),))


def test_running_episodes_are_held_back_and_stale_ones_processed_as_truncated(data_dir, tmp_path):
    finished = [episode_span("done", 0, 1_000_000, task="t"), llm_call("done", "c", 10, 20, [1], [2]),
                reward_span("done", "r", 30, 1.0)]
    # no episode span and no root yet: the agent is still running (its parent span is not exported)
    running = [llm_call("run", "c", 300_000, 399_000, [1], [2]), reward_span("run", "r", 399_500, 0.0)]
    write_spans(data_dir, finished + running)
    manifest = build_dataset(data_dir, tmp_path / "a")
    assert set(dataset_table(tmp_path / "a").column("episode_id").to_pylist()) == {"done"}
    assert manifest["counts"]["episodes"]["pending"] == 1
    assert manifest["counts"]["llm_calls"]["skipped"] == {"episode_pending": 1}
    # the data's clock is 1.0 s (latest span end); the running episode is idle since 0.3995 s
    manifest = build_dataset(data_dir, tmp_path / "b", episode_timeout_s=0.1)
    assert set(dataset_table(tmp_path / "b").column("episode_id").to_pylist()) == {"done", "run"}
    assert manifest["counts"]["episodes"]["truncated"] == 1


def test_spans_without_episode_baggage_use_their_trace(data_dir, tmp_path):
    rows = [
        span("x", "root", "agent run", 0, 100, parent=None, baggage=False),
        llm_call("x", "c", 1, 10, [1], [2], baggage=False),
        reward_span("x", "r", 20, 1.0, baggage=False),
    ]
    write_spans(data_dir, rows)
    build_dataset(data_dir, tmp_path / "out")
    assert dataset_table(tmp_path / "out").column("episode_id").to_pylist() == [trace_of("x")]
