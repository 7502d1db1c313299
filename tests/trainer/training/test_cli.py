"""`tracerl train`: one pass over a dataset folder, a new checkpoint, and the endpoint refreshed."""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import pyarrow as pa
import pyarrow.parquet as pq

from tracerl.schemas import DATASET_SCHEMA
from tracerl.trainer.serving.app import running_server
from tracerl.trainer.tiny_model import build_tiny_model


def _tracerl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tracerl", *args], capture_output=True, text=True, timeout=300)


def test_train_writes_a_checkpoint_and_refreshes_the_server(tmp_path):
    model = build_tiny_model(tmp_path / "v0", seed=0)
    rows = [{
        "episode_id": f"e{i}", "task_id": "t", "split": "train", "agent_name": None, "step": 0,
        "prompt_token_ids": [10, 11, 12], "response_token_ids": [20 + i % 2, 5], "response_logprobs": None,
        "response_mask": [1, 1], "reward": float(i % 2), "return": float(i % 2), "advantage": 1.0 if i % 2 else -1.0,
        "policy_version": 0, "trace_id": f"{i:032x}", "span_id": f"{i:016x}", "response_id": None,
        "input_messages": None, "output_messages": None,
    } for i in range(8)]
    (tmp_path / "ds").mkdir()
    pq.write_table(pa.Table.from_pylist(rows, schema=DATASET_SCHEMA), tmp_path / "ds" / "transitions-0.parquet")
    with running_server(model) as server:
        done = _tracerl("train", "--dataset", str(tmp_path / "ds"), "--model", str(model),
                        "--out", str(tmp_path / "v1"), "--server", server.base_url, "--version", "7")
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout.strip().splitlines()[-1])
        assert result["samples"] == 8 and result["steps"] >= 1 and result["policy_version"] == 7
        assert (tmp_path / "v1" / "config.json").exists()
        reply = httpx.post(f"{server.base_url}/completions", json={"prompt": "task", "max_tokens": 1})
        assert reply.json()["policy_version"] == 7


def test_train_names_a_missing_dataset_and_what_to_run(tmp_path):
    model = build_tiny_model(tmp_path / "v0", seed=0)
    done = _tracerl("train", "--dataset", str(tmp_path / "none"), "--model", str(model), "--out", str(tmp_path / "v1"))
    assert done.returncode != 0
    assert "--dataset" in done.stderr and "build-dataset" in done.stderr
    assert not (tmp_path / "v1").exists()
