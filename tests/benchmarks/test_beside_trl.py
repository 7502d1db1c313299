"""benchmarks/beside_trl.py, tracerl beside TRL's GRPO on SmolLM2, runs both sides for one small step (so it cannot rot)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tracerl_testing.installed import require
from tracerl_testing.processes import lone_process_env

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "beside_trl.py"
TRL_PYTHON = os.environ.get("TRACERL_TRL_PYTHON") or str(REPO / ".venv-trl" / "bin" / "python")


@pytest.mark.slow
def test_both_sides_take_one_optimizer_step_and_are_measured_by_one_evaluator(tmp_path, vllm_python, smollm2_folder):
    require(Path(TRL_PYTHON).is_file(), "TRL's venv", f"build {TRL_PYTHON} as .ci/run's trl_venv does (testing/trl_venv/requirements.txt)")
    results = tmp_path / "results"
    command = [sys.executable, str(SCRIPT), "--seeds", "0", "--steps", "1", "--tasks", "1", "--group", "2", "--eval-tasks", "2",
               "--out", str(tmp_path / "runs"), "--results", str(results)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1200, env={**lone_process_env(), "TRACERL_VLLM_PYTHON": vllm_python})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    tracerl, trl = json.loads((results / "raw.json").read_text())["runs"]
    assert (tracerl["side"], trl["side"]) == ("tracerl", "trl")
    for run in (tracerl, trl):
        step, = run["steps"]
        assert step["episodes"] == 2 and step["generated_tokens"] > 0 and step["trained_tokens"] > step["generated_tokens"]
        assert step["generation_seconds"] > 0 and step["train_seconds"] > 0 and run["peak_rss_bytes"] > 0
        assert len(run["held_out"]) == 2  # before and after the step
    assert tracerl["steps"][0]["status"] == "trained"  # trained, saved and reloaded into vLLM as version 1
    assert (tmp_path / "runs" / "trl-seed0" / "step-1" / "model.safetensors").is_file()
    # the same starting policy, run greedily by the same agent on the same held-out tasks
    assert tracerl["held_out"][0] == trl["held_out"][0]
    # one LLM call per episode: trajectory mode has nothing to merge
    assert tracerl["steps"][0]["trajectory_rows"] == tracerl["steps"][0]["transition_rows"] == 2
    assert "tracerl / TRL" in (results / "summary.txt").read_text()
