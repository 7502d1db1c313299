"""The examples as a GPU user runs them, on a model of a real architecture: the command with a
local Qwen2 folder where they would name a hub id, the paper's data sets (`--data`, a few lines of
each in its published format), vLLM serving, each round published to it.

The model (``tracerl_testing.qwen2_model``: Qwen2's classes and chat format, hermes tool calls,
random weights) earns no reward, so nothing is learned here (the backend tests show the
update); what is shown is that every part a real model goes through runs: vLLM serves it
with token ids and log-probs, the agent's calls are captured, the dataset builds, the chosen
backend trains, the checkpoint (or the LoRA adapter) is published and the next round's calls
come from it. A LoRA round on vLLM runs on a real pretrained model (``calc/test_smollm2.py``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


def served_versions(round_dir: Path) -> list[int]:
    """The policy versions the round's calls were answered by (as captured, from vLLM's weight version)."""
    query = f"SELECT DISTINCT policy_version FROM read_parquet('{round_dir}/dataset/*.parquet') ORDER BY 1"
    return [v for (v,) in duckdb.sql(query).fetchall()]


DATA = REPO / "tests" / "examples"


@pytest.mark.parametrize(("example", "training"), [
    ("sql", ["--backend", "openrlhf", "--data", str(DATA / "sql" / "data" / "dev.json")]),
    ("calc", ["--backend", "openrlhf", "--tool-call-parser", "hermes", "--data", str(DATA / "calc" / "data" / "calcx_sample.jsonl")]),
    ("rag", ["--tool-call-parser", "hermes", "--data", str(DATA / "rag" / "data" / "musique_sample.jsonl")]),
], ids=["sql-spider-openrlhf", "calc-calcx-openrlhf", "rag-musique-torch"])
def test_two_rounds_on_vllm_publish_each_checkpoint_and_the_next_calls_come_from_it(example, training, qwen2_folder, vllm_python, tmp_path):
    out = tmp_path / "run"
    command = [
        sys.executable, "-m", f"examples.{example}.train", "--model", str(qwen2_folder), "--server", "vllm", *training,
        "--rounds", "2", "--tasks-per-round", "2", "--group-size", "2", "--eval-tasks", "2", "--max-tokens", "24", "--out", str(out),
    ]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "learning rate 1e-06" in done.stderr or "learning rate 1e-05" in done.stderr  # the real-model defaults, said at start
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rows] == [0, 1, 2]
    for rnd in range(3):
        assert served_versions(out / "rounds" / f"{rnd:03d}") == [rnd]
    for row in rows[:2]:
        assert row["served_logprob_gap"] < 1e-4  # vLLM (float32 on CPU) and the trainer agree on what was sampled
        assert row["checkpoint_bytes"] > 0 and row["publish_seconds"] > 0
    kept = sorted(p.name for p in (out / "policy").glob("v*") if any(f.suffix == ".safetensors" for f in p.iterdir()))
    assert kept == ["v1", "v2"]  # --keep-checkpoints 2: older weights deleted
