"""`tracerl train`: one pass over a dataset folder, a new checkpoint, and the endpoint refreshed."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import httpx

from tracerl.schemas import DATASET_SCHEMA_VERSION
from tracerl.trainer.serving.app import running_server
from tracerl.core.net import free_port

ROWS = [
    {"prompt_token_ids": [10, 11, 12], "response_token_ids": [20 + i % 2, 5], "response_logprobs": None, "advantage": 1.0 if i % 2 else -1.0}
    for i in range(8)
]


def _tracerl(*args: str) -> subprocess.CompletedProcess:
    wide = {**os.environ, "COLUMNS": "400"}  # rich boxes errors at the terminal's width: keep messages on one line
    return subprocess.run([sys.executable, "-m", "tracerl", *args], capture_output=True, text=True, timeout=300, env=wide)


def _train(tmp_path, model, *extra: str) -> subprocess.CompletedProcess:
    return _tracerl("train", "--dataset", str(tmp_path / "ds"), "--model", str(model), "--out", str(tmp_path / "v1"), *extra)


def test_train_writes_a_checkpoint_and_refreshes_the_server(tmp_path, tiny_checkpoint, write_dataset):
    write_dataset(tmp_path / "ds", ROWS)
    with running_server(tiny_checkpoint) as server:
        done = _train(tmp_path, tiny_checkpoint, "--server", server.base_url, "--version", "7")
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout.strip().splitlines()[-1])
        assert result["samples"] == 8 and result["steps"] >= 1 and result["policy_version"] == 7
        assert result["skipped"] == {} and result["publish_seconds"] > 0
        assert (tmp_path / "v1" / "config.json").exists()
        reply = httpx.post(f"{server.base_url}/completions", json={"prompt": "task", "max_tokens": 1})
        assert reply.json()["policy_version"] == 7


def test_train_names_a_missing_dataset_and_what_to_run(tmp_path, tiny_checkpoint):
    done = _train(tmp_path, tiny_checkpoint)
    assert done.returncode != 0
    assert "--dataset" in done.stderr and "build-dataset" in done.stderr
    assert not (tmp_path / "v1").exists()


def test_train_refuses_a_dataset_of_another_schema_version(tmp_path, tiny_checkpoint, write_dataset):
    write_dataset(tmp_path / "ds", ROWS, schema_version=DATASET_SCHEMA_VERSION + 1)
    done = _train(tmp_path, tiny_checkpoint)
    assert done.returncode != 0
    message = done.stderr
    assert f"version {DATASET_SCHEMA_VERSION + 1}" in message and f"version {DATASET_SCHEMA_VERSION}" in message
    assert "build-dataset" in message
    assert not (tmp_path / "v1").exists()


def test_an_unreachable_server_keeps_the_checkpoint_and_fails_saying_so(tmp_path, tiny_checkpoint, write_dataset):
    write_dataset(tmp_path / "ds", ROWS)
    nowhere = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    done = _train(tmp_path, tiny_checkpoint, "--server", nowhere)
    assert done.returncode == 1
    assert "cannot reach" in done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1])["checkpoint"] == str(tmp_path / "v1")
    assert (tmp_path / "v1" / "config.json").exists()
