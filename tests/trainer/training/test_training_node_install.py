"""A GPU training node installs ``tracerl[torch]`` and runs ``tracerl train`` on a dataset built elsewhere.

The rounds around training (``train run``, ``train loop``, ``policy``) need the pipeline and the
collector too, which such a node has no use for: the H200 check found ``tracerl train`` refusing to
start without duckdb, polars and openai. A fresh venv gets torch (CPU, pinned as the README says) and
this checkout with the ``torch`` extra alone: it trains the tiny model for real, the pipeline and
collector modules are absent, and the rounds' commands say which extra to install.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from tracerl.trainer.training.checkpoint import read_checkpoint_manifest
from tracerl_testing.installs import importable, install_venv

pytestmark = pytest.mark.slow  # a fresh venv with torch: about a minute

ROWS = [{"prompt_token_ids": [10, 11, 12], "response_token_ids": [20 + i % 2, 5], "response_logprobs": None,
         "advantage": 1.0 if i % 2 else -1.0, "policy_version": 1} for i in range(4)]


@pytest.fixture(scope="module")
def node_python(tmp_path_factory):
    return install_venv(tmp_path_factory.mktemp("node") / "venv", "torch==2.13.0", "tracerl[torch]")


def test_the_torch_extra_trains_without_the_pipeline_or_the_collector(node_python, tiny_checkpoint, write_dataset, tmp_path):
    assert importable(node_python, ("duckdb", "polars", "grpc", "uvicorn", "starlette", "matplotlib")) == []
    write_dataset(tmp_path / "ds", ROWS)
    done = subprocess.run([str(node_python.parent / "tracerl"), "train", "--dataset", str(tmp_path / "ds"), "--model", str(tiny_checkpoint),
                           "--out", str(tmp_path / "v1"), "--epochs", "1"], capture_output=True, text=True, timeout=300, cwd=node_python.parent)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["samples"] == 4 and result["steps"] >= 1
    assert read_checkpoint_manifest(tmp_path / "v1")["parent"] == str(tiny_checkpoint.resolve())


@pytest.mark.parametrize("command", [["train", "run", "--config", "rounds.toml"], ["train", "loop"], ["policy", "list"]])
def test_the_rounds_commands_say_which_extra_to_install(node_python, command):
    done = subprocess.run([str(node_python.parent / "tracerl"), *command], capture_output=True, text=True, timeout=120, cwd=node_python.parent)
    assert done.returncode == 2
    assert "pip install 'tracerl[train]'" in done.stderr and "Traceback" not in done.stderr, done.stderr
