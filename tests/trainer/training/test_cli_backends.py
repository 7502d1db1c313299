"""`tracerl train --backend ...`: both backends behind one command, with stale rows dropped and a manifest written."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tracerl.schemas import DATASET_SCHEMA_VERSION
from tracerl.trainer.training.checkpoint import CHECKPOINT_MANIFEST_FILE, read_checkpoint_manifest
from tracerl_testing.installed import require_openrlhf

pytestmark = pytest.mark.slow  # each test starts `tracerl train` processes (~15 s apiece here)

# two rows from each of policy versions 1, 2 and 3
ROWS = [
    {"prompt_token_ids": [10, 11, 12], "response_token_ids": [20 + i % 2, 5], "response_logprobs": None,
     "advantage": 1.0 if i % 2 else -1.0, "policy_version": 1 + i // 2}
    for i in range(6)
]


def _train(tmp_path, model, *extra: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "tracerl", "train", "--dataset", str(tmp_path / "ds"), "--model", str(model), "--out", str(tmp_path / "v4"), *extra]
    wide = {**os.environ, "COLUMNS": "400"}  # rich boxes errors at the terminal's width: keep messages on one line
    return subprocess.run(command, capture_output=True, text=True, timeout=300, env=wide)


@pytest.mark.parametrize("backend", ["torch", "openrlhf"])
def test_each_backend_skips_stale_rows_counts_them_and_writes_the_manifest(tmp_path, tiny_checkpoint, write_dataset, backend):
    if backend == "openrlhf":
        require_openrlhf()
    write_dataset(tmp_path / "ds", ROWS)
    done = _train(tmp_path, tiny_checkpoint, "--backend", backend, "--max-policy-lag", "1", "--epochs", "1")
    assert done.returncode == 0, done.stderr
    [line] = done.stdout.strip().splitlines()  # stdout is the JSON line alone, whatever the backend prints
    result = json.loads(line)
    assert result["backend"] == backend and result["samples"] == 4  # versions 2 and 3: within 1 of the newest, 3
    assert result["skipped"] == {"policy lag over 1": 2}
    manifest = read_checkpoint_manifest(tmp_path / "v4")
    assert manifest["backend"] == backend and manifest["parent"] == str(tiny_checkpoint.resolve())
    assert manifest["parent_version"] is None and manifest["policy_version"] is None  # nothing announced, nothing published
    assert manifest["dataset"]["manifest"]["schema_version"] == DATASET_SCHEMA_VERSION
    assert manifest["dataset"]["skipped"] == {"policy lag over 1": 2}
    assert manifest["metrics"] == {k: result[k] for k in manifest["metrics"]}
    assert (tmp_path / "v4" / "config.json").is_file()


def test_the_lag_counts_from_the_parent_checkpoints_version(tmp_path, tiny_checkpoint, write_dataset):
    """A checkpoint published as version 2 trains on rows of versions 1 and 2 with lag 1, not on 3's (from the future)."""
    write_dataset(tmp_path / "ds", ROWS)
    parent = tmp_path / "v2"
    done = _train(tmp_path, tiny_checkpoint, "--epochs", "1", "--version", "2")
    assert done.returncode == 0, done.stderr
    (tmp_path / "v4").rename(parent)
    assert read_checkpoint_manifest(parent)["policy_version"] == 2
    done = _train(tmp_path, parent, "--max-policy-lag", "0", "--epochs", "1")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["samples"] == 4 and result["skipped"] == {"policy lag over 0": 2}
    assert read_checkpoint_manifest(tmp_path / "v4")["parent_version"] == 2


def test_only_stale_rows_is_a_clear_error(tmp_path, tiny_checkpoint, write_dataset):
    require_openrlhf()
    write_dataset(tmp_path / "ds", [dict(row, policy_version=0) for row in ROWS[:2]] + [dict(ROWS[2], policy_version=None)])
    parent = tmp_path / "parent"
    parent.mkdir()
    for item in tiny_checkpoint.iterdir():
        (parent / item.name).symlink_to(item)
    (parent / CHECKPOINT_MANIFEST_FILE).write_text(json.dumps({"policy_version": 5}))
    done = _train(tmp_path, parent, "--backend", "openrlhf", "--max-policy-lag", "2")
    assert done.returncode != 0 and not (tmp_path / "v4").exists()
    assert "holds no usable transition" in done.stderr and "'policy lag over 2': 2" in done.stderr
    assert "'no policy version (lag unknown)': 1" in done.stderr


def test_a_dataset_of_another_schema_version_is_refused_by_the_openrlhf_backend_too(tmp_path, tiny_checkpoint, write_dataset):
    require_openrlhf()
    write_dataset(tmp_path / "ds", ROWS, schema_version=DATASET_SCHEMA_VERSION + 1)
    done = _train(tmp_path, tiny_checkpoint, "--backend", "openrlhf")
    assert done.returncode != 0 and not (tmp_path / "v4").exists()
    assert f"holds dataset schema version {DATASET_SCHEMA_VERSION + 1}" in done.stderr and "pipeline build-dataset" in done.stderr

