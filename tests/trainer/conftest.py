"""Shared fixtures of the trainer tests."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tracerl.schemas import DATASET_SCHEMA, DATASET_SCHEMA_VERSION
from tracerl.schemas.dataset_folder import MANIFEST_FILE, MANIFEST_SCHEMA_VERSION


@pytest.fixture(scope="session")
def policy_server():
    """One built-in server over the tiny model, shared by the whole session.

    It stays at policy version 0: tests that load weights start their own server.
    """
    from tracerl.trainer.serving.app import running_server

    with running_server() as server:
        yield server


@pytest.fixture(scope="session")
def write_dataset():
    """Write rows chosen by a test as a dataset folder laid out as `pipeline build-dataset` does.

    Each row gives at least its token ids, log-probs and advantage; the other columns get
    plain values. Datasets built by the real pipeline are in test_dataset.py.
    """

    def write(folder: Path, rows: list[dict], schema_version: int = DATASET_SCHEMA_VERSION) -> Path:
        full = []
        for i, row in enumerate(rows):
            full.append({
                "episode_id": f"ep{i}", "task_id": "t", "split": "train", "agent_name": None, "step": 0,
                "response_mask": [1] * len(row["response_token_ids"]), "reward": row["advantage"],
                "return": row["advantage"], "policy_version": 0, "trace_id": f"{i:032x}", "span_id": f"{i:016x}",
                "response_id": None, "input_messages": None, "output_messages": None, "token_source": "served", **row,
            })
        folder.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(full, schema=DATASET_SCHEMA), folder / "transitions-0.parquet")
        (folder / MANIFEST_FILE).write_text(json.dumps({MANIFEST_SCHEMA_VERSION: schema_version}))
        return folder

    return write
