"""The dataset folder every reader uses: its files, its manifest checked, its episodes and rows per policy from one read."""

from __future__ import annotations

import pyarrow.parquet as pq

from tracerl.pipeline import build_dataset
from tracerl.schemas.dataset_folder import DatasetFolder, episodes_of, index_of
from tracerl_testing.span_builders import episode_span, llm_call, reward_span, write_spans


def _two_policies(data_dir):
    """e1: a writer call (v2) and a checker call (v3) served by their own policies; e2: the writer only (v3)."""
    rows = [episode_span("e1", 0, 100, task="t"), llm_call("e1", "w", 1, 10, [1], [2], agent="writer", model="writer", version=2),
            llm_call("e1", "c", 11, 20, [3], [4], agent="checker", model="checker", version=3), reward_span("e1", "r", 30, 1.0),
            episode_span("e2", 0, 100, task="t"), llm_call("e2", "w", 1, 10, [1], [2], agent="writer", model="writer", version=3),
            reward_span("e2", "r", 30, 0.0)]
    return write_spans(data_dir, rows)


def test_episodes_and_rows_per_policy_come_from_one_read_of_the_files(data_dir, tmp_path, monkeypatch):
    build_dataset(_two_policies(data_dir), tmp_path / "out", policies={"writer": ("writer",), "checker": ("checker",)})
    folder = DatasetFolder(tmp_path / "out")
    reads = []
    real = pq.read_table
    monkeypatch.setattr(pq, "read_table", lambda *a, **k: reads.append(a[0]) or real(*a, **k))
    assert folder.episodes() == {"e1": [2, 3], "e2": [3]}
    assert folder.episodes("writer") == {"e1": [2], "e2": [3]} and folder.episodes("checker") == {"e1": [3]}
    assert (folder.rows(), folder.rows("writer"), folder.rows("checker"), folder.rows("nobody")) == (3, 2, 1, 0)
    assert len(reads) == len(folder.files())  # the index: read once, each file once
    assert episodes_of(index_of(folder.files()), "writer") == folder.episodes("writer")


def test_an_empty_folder_has_no_episodes_and_no_rows(tmp_path):
    folder = DatasetFolder(tmp_path)
    assert (folder.files(), folder.episodes(), folder.rows(), folder.table().num_rows) == ([], {}, 0, 0)
