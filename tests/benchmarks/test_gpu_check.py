"""benchmarks/gpu_check.py, the command a GPU machine runs first, runs end to end on CPU (--device cpu --tiny)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tracerl_testing.installed import require_openrlhf
from tracerl_testing.processes import lone_process_env

require_openrlhf()

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_check.py"


@pytest.mark.slow
def test_both_backends_train_a_tiny_qwen2_and_report_one_json_line(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--tiny", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=600, env=lone_process_env())
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 1
    result = json.loads(lines[0])
    assert result["device"] == "cpu" and result["model"] == "tiny Qwen2"
    for backend in ("torch", "openrlhf"):
        row = result[backend]
        assert row["steps"] == 2 and row["micro_batch"] == 2 and row["tokens_per_second"] > 0 and row["peak_memory_gib"] > 0
        # float32 on CPU: the trainer's log-probs are a plain Hugging Face forward's
        assert row["logprob_max_diff_vs_hf_fp32"] < 1e-4
    assert result["torch"]["loss"] == pytest.approx(result["openrlhf"]["loss"], abs=1e-5)
