"""build_dataset: one transition per policy LLM call, the paper's credit, per-task baselines, a manifest."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tracerl.pipeline import PipelineInputError, build_dataset, dataset_table, read_manifest, writer
from tracerl.schemas import DATASET_SCHEMA, DATASET_SCHEMA_VERSION
from tracerl_testing.span_builders import episode_span, llm_call, reward_span, tool_span, write_spans


def _two_call_episode(ep: str, task: str, reward: float) -> list[dict]:
    return [
        episode_span(ep, 0, 100, task=task),
        llm_call(ep, "c1", 1, 10, [1, 2], [3, 4], logprobs=[-0.1, -0.2]),
        tool_span(ep, "tool", 11, 12),
        llm_call(ep, "c2", 13, 20, [1, 2, 3, 4, 9], [5]),
        reward_span(ep, "r", 30, reward),
    ]


def test_identical_credit_and_grpo_per_task(data_dir, tmp_path):
    # task t1: returns 1 and 0 -> mean 0.5, population std 0.5 -> advantages +1 / -1
    # task t2: a single episode -> its own baseline -> advantage 0
    write_spans(data_dir, _two_call_episode("e1", "t1", 1.0) + _two_call_episode("e2", "t1", 0.0)
                + _two_call_episode("e3", "t2", 1.0))
    manifest = build_dataset(data_dir, tmp_path / "out")
    rows = dataset_table(tmp_path / "out").to_pylist()
    assert [(r["episode_id"], r["step"]) for r in rows] == [("e1", 0), ("e1", 1), ("e2", 0), ("e2", 1), ("e3", 0), ("e3", 1)]
    # the reward is attached to the last call that ended before it; every call gets the episode's return
    assert [r["reward"] for r in rows] == [0.0, 1.0, 0.0, 0.0, 0.0, 1.0]
    assert [r["return"] for r in rows] == [1.0, 1.0, 0.0, 0.0, 1.0, 1.0]
    assert [r["advantage"] for r in rows] == [1.0, 1.0, -1.0, -1.0, 0.0, 0.0]
    first = rows[0]
    assert first["prompt_token_ids"] == [1, 2] and first["response_token_ids"] == [3, 4]
    assert first["response_mask"] == [1, 1] and first["response_logprobs"] == pytest.approx([-0.1, -0.2])
    assert first["task_id"] == "t1" and first["split"] == "train" and first["policy_version"] == 1
    assert json.loads(first["input_messages"])[0]["role"] == "user"
    # files are what the trainer globs, with the dataset schema
    files = sorted((tmp_path / "out").glob("transitions-*.parquet"))
    assert files and pq.read_schema(files[0]).equals(DATASET_SCHEMA)
    assert read_manifest(tmp_path / "out") == manifest
    assert manifest["counts"]["transitions"] == 6 and manifest["counts"]["episodes"]["emitted"] == 3
    assert manifest["schema_version"] == DATASET_SCHEMA_VERSION and manifest["parameters"]["credit"] == "identical"
    assert manifest["watermark"]["episodes_processed"] == 3
    assert any(w.startswith("1 of 2 task group(s) hold a single episode") for w in manifest["warnings"])


def test_same_input_gives_the_same_rows(data_dir, tmp_path):
    write_spans(data_dir, _two_call_episode("e1", "t1", 1.0) + _two_call_episode("e2", "t1", 0.0))
    build_dataset(data_dir, tmp_path / "a")
    build_dataset(data_dir, tmp_path / "b")
    assert dataset_table(tmp_path / "a").equals(dataset_table(tmp_path / "b"))


def test_episodes_spread_over_span_files_come_out_whole_in_files_of_row_groups(data_dir, tmp_path, monkeypatch):
    # span file k holds the start of episode k and the end of episode k-1: no file completes its own episodes
    episodes = [_two_call_episode(f"e{k}", "t1", float(k % 2)) for k in range(6)]
    for k in range(7):
        write_spans(data_dir, (episodes[k][:3] if k < 6 else []) + (episodes[k - 1][3:] if k else []))
    build_dataset(data_dir, tmp_path / "whole")
    expected = dataset_table(tmp_path / "whole")
    assert [(r["episode_id"], r["step"]) for r in expected.to_pylist()] == [(f"e{k}", s) for k in range(6) for s in (0, 1)]

    # the same rows in the same order when written in row groups of 2 and files of 4 rows
    monkeypatch.setattr(writer, "ROW_GROUP_ROWS", 2)
    monkeypatch.setattr(writer, "FILE_ROWS", 4)
    manifest = build_dataset(data_dir, tmp_path / "small")
    assert dataset_table(tmp_path / "small").equals(expected)
    files = sorted((tmp_path / "small").glob("transitions-*.parquet"))
    assert [pq.ParquetFile(f).metadata.num_row_groups for f in files] == [2, 2, 2]
    assert manifest["outputs"]["files"] == [f.name for f in files] and manifest["counts"]["rows_written"] == 12


def test_a_write_that_fails_leaves_no_half_written_file(tmp_path, monkeypatch):
    monkeypatch.setattr(writer, "ROW_GROUP_ROWS", 1)
    row = {"episode_id": "e", "step": 0, "prompt_token_ids": [1], "response_token_ids": [2], "reward": 0.0, "return": 0.0,
           "advantage": 0.0, "trace_id": "t", "span_id": "s", "token_source": "served"}

    def tables():
        yield pa.Table.from_pylist([row, row], schema=DATASET_SCHEMA)  # a row group written, the file not committed
        raise OSError("the span files went away")

    with pytest.raises(OSError, match="went away"):
        writer.write_dataset(tables(), str(tmp_path))
    assert not list(tmp_path.iterdir())


def test_rebuilding_into_the_same_folder_replaces_the_dataset(data_dir, tmp_path):
    write_spans(data_dir, _two_call_episode("e1", "t1", 1.0))
    build_dataset(data_dir, tmp_path / "out")
    build_dataset(data_dir, tmp_path / "out")
    assert dataset_table(tmp_path / "out").num_rows == 2


def test_one_episode_per_task_is_not_a_silently_useless_dataset(data_dir, tmp_path):
    # the README's first pattern: one episode per task; GRPO has no baseline in a group of one
    write_spans(data_dir, _two_call_episode("e1", "t1", 1.0) + _two_call_episode("e2", "t2", 0.0)
                + _two_call_episode("e3", "t3", 0.5))
    manifest = build_dataset(data_dir, tmp_path / "grpo")
    assert {r["advantage"] for r in dataset_table(tmp_path / "grpo").to_pylist()} == {0.0}
    assert manifest["counts"]["task_groups"] == {"total": 3, "single_episode": 3, "single_episode_transitions": 6}
    [warning] = [w for w in manifest["warnings"] if "single episode" in w]
    assert warning.startswith("all 3 task group(s) hold a single episode, so --advantage grpo gives their 6 transition(s)")
    assert "sample several episodes per task" in warning and "--advantage batch" in warning and "--advantage none" in warning
    # the batch baseline: the mean return of the three episodes, 0.5
    manifest = build_dataset(data_dir, tmp_path / "batch", advantage="batch")
    assert [r["advantage"] for r in dataset_table(tmp_path / "batch").to_pylist()] == [0.5, 0.5, -0.5, -0.5, 0.0, 0.0]
    assert not [w for w in manifest["warnings"] if "single episode" in w]


def test_episode_without_reward_and_calls_without_token_ids_are_skipped_and_counted(data_dir, tmp_path):
    rows = _two_call_episode("e1", "t1", 1.0)
    rows += [episode_span("e2", 0, 50, task="t1"), llm_call("e2", "c1", 1, 10, [1], [2])]  # no reward
    rows += [
        episode_span("e3", 0, 50, task="t1"),
        llm_call("e3", "c1", 1, 10, None, None),  # the server returned no token ids
        llm_call("e3", "c2", 11, 20, [7], [8]),
        reward_span("e3", "r", 30, 0.0),
    ]
    write_spans(data_dir, rows)
    manifest = build_dataset(data_dir, tmp_path / "out")
    table = dataset_table(tmp_path / "out")
    assert sorted(set(table.column("episode_id").to_pylist())) == ["e1", "e3"]
    # e3's call without token ids is not a row, but the step numbering still counts it
    assert [r["step"] for r in table.to_pylist() if r["episode_id"] == "e3"] == [1]
    skipped = manifest["counts"]["llm_calls"]["skipped"]
    assert skipped == {"episode_no_reward": 1, "no_token_ids": 1}
    assert manifest["counts"]["episodes"]["without_reward"] == 1
    assert any("without prompt/completion token ids" in w for w in manifest["warnings"])
    assert any("episodes with no reward" in w for w in manifest["warnings"])


def test_missing_spans_folder_is_a_clear_error(tmp_path):
    with pytest.raises(PipelineInputError, match="does not exist"):
        build_dataset(tmp_path / "nowhere", tmp_path / "out")
    assert not list((tmp_path / "out").iterdir())


def test_empty_spans_folder_gives_an_empty_dataset_and_says_why(tmp_path):
    (tmp_path / "data" / "spans").mkdir(parents=True)
    manifest = build_dataset(tmp_path / "data", tmp_path / "out")
    assert manifest["counts"]["transitions"] == 0
    assert manifest["warnings"][0].startswith("no readable span files")
    assert not list((tmp_path / "out").glob("transitions-*.parquet"))


def test_corrupt_file_is_skipped_and_the_rest_is_kept(data_dir, tmp_path):
    write_spans(data_dir, _two_call_episode("e1", "t1", 1.0))
    bad = data_dir / "spans" / "date=2026-01-01" / "hour=00" / "spans-broken.parquet"
    bad.write_bytes(b"PAR1 this is not parquet")
    (data_dir / "spans" / ".spans-inflight.parquet.tmp").write_bytes(b"half written")  # dot-files are ignored
    manifest = build_dataset(data_dir, tmp_path / "out")
    assert manifest["counts"]["transitions"] == 2
    [rejected] = manifest["inputs"]["rejected_files"]
    assert rejected["file"] == str(bad) and "not a readable Parquet file" in rejected["reason"]
    assert any("spans-broken.parquet" in w for w in manifest["warnings"])


def test_a_file_with_a_good_footer_and_bad_data_fails_clearly_and_keeps_the_old_dataset(data_dir, tmp_path):
    write_spans(data_dir, _two_call_episode("e1", "t1", 1.0))
    build_dataset(data_dir, tmp_path / "out")
    [path] = list((data_dir / "spans").rglob("*.parquet"))
    raw = bytearray(path.read_bytes())
    footer = int.from_bytes(raw[-8:-4], "little") + 8
    raw[4:len(raw) - footer] = b"\xff" * (len(raw) - footer - 4)  # every page damaged, footer intact
    path.write_bytes(bytes(raw))
    with pytest.raises(PipelineInputError, match="reading the span files failed"):
        build_dataset(data_dir, tmp_path / "out")
    assert dataset_table(tmp_path / "out").num_rows == 2
