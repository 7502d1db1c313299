"""Trajectory mode, incremental builds with a watermark, and the OpenRLHF / Hugging Face exports."""

from __future__ import annotations

import json

import pytest

from tracerl.pipeline import build_dataset, dataset_table
from tracerl_testing.span_builders import episode_span, llm_call, reward_span, write_spans


def _chat(ep: str, task: str = "t", reward: float = 1.0) -> list[dict]:
    # call 2's prompt = call 1's prompt + response + tool output [9, 9]; call 3 starts afresh
    return [
        episode_span(ep, 0, 1000, task=task),
        llm_call(ep, "c1", 10, 20, [1, 2], [3, 4], logprobs=[-0.1, -0.2]),
        llm_call(ep, "c2", 30, 40, [1, 2, 3, 4, 9, 9], [5], logprobs=[-0.3]),
        llm_call(ep, "c3", 50, 60, [7], [8], logprobs=[-0.4]),
        reward_span(ep, "r", 70, reward),
    ]


def test_trajectory_mode_merges_calls_that_extend_the_previous_one(data_dir, tmp_path):
    write_spans(data_dir, _chat("e1"))
    build_dataset(data_dir, tmp_path / "out", trajectory=True, advantage="none")
    merged, alone = dataset_table(tmp_path / "out").to_pylist()
    assert merged["prompt_token_ids"] == [1, 2]
    assert merged["response_token_ids"] == [3, 4, 9, 9, 5]
    assert merged["response_mask"] == [1, 1, 0, 0, 1]  # the tool's tokens are not the policy's
    assert merged["response_logprobs"] == pytest.approx([-0.1, -0.2, 0.0, 0.0, -0.3])
    assert (merged["step"], alone["step"]) == (0, 2)
    assert (alone["prompt_token_ids"], alone["response_mask"]) == ([7], [1])


def test_incremental_runs_process_only_new_complete_episodes(data_dir, tmp_path):
    out = tmp_path / "out"
    write_spans(data_dir, _chat("e1"))
    # e2 is still running: its episode span has not been exported yet
    write_spans(data_dir, _chat("e2")[1:])
    first = build_dataset(data_dir, out, incremental=True)
    assert set(dataset_table(out).column("episode_id").to_pylist()) == {"e1"}
    assert first["counts"]["episodes"]["pending"] == 1
    write_spans(data_dir, [_chat("e2")[0]] + _chat("e3", reward=0.0))  # e2 ends, e3 runs
    second = build_dataset(data_dir, out, incremental=True)
    assert second["counts"]["episodes"]["already_processed"] == 1
    assert second["counts"]["llm_calls"]["skipped"] == {"already_processed": 3}
    assert second["watermark"]["episodes_processed"] == 3
    table = dataset_table(out)
    assert sorted(table.column("episode_id").to_pylist()) == ["e1"] * 3 + ["e2"] * 3 + ["e3"] * 3
    assert len(list(out.glob("transitions-*.parquet"))) == 2
    third = build_dataset(data_dir, out, incremental=True)  # nothing new: nothing written
    assert third["counts"]["rows_written"] == 0 and len(list(out.glob("transitions-*.parquet"))) == 2


def test_openrlhf_and_hugging_face_exports(data_dir, tmp_path):
    datasets = pytest.importorskip("datasets")
    rows = _chat("e1") + _chat("e2", reward=0.0)
    write_spans(data_dir, rows)
    out = tmp_path / "out"
    manifest = build_dataset(data_dir, out, exports=("openrlhf", "hf"))
    assert manifest["outputs"]["exports"]["openrlhf"]["rows"] == 6
    first = json.loads((out / "openrlhf" / "transitions.jsonl").read_text().splitlines()[0])
    assert first["input"] == [{"role": "user", "content": "q"}] and first["output"] == "a"
    assert first["label"] == 1.0 and first["response_mask"] == [1, 1]
    loaded = datasets.load_dataset(str(out / "hf"))
    assert list(loaded) == ["train"] and loaded["train"].num_rows == 6
    assert loaded["train"][0]["prompt_token_ids"] == [1, 2]
