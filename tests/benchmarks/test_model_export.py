"""benchmarks/model_export.py runs end to end on the tiny Llama (--quick: one round, one run, one repeat), so it cannot rot."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tracerl_testing.installed import require_module
from tracerl_testing.llama_cpp import require_llama_cpp
from tracerl_testing.processes import lone_process_env
from tracerl_testing.trackers import HOW

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "model_export.py"


@pytest.mark.slow
def test_each_format_and_both_loops_get_a_row_and_stdout_holds_only_the_tables(tiny_checkpoint):
    require_llama_cpp()
    for module in ("tensorboard", "mlflow", "wandb", "trackio"):
        require_module(module, HOW)
    done = subprocess.run([sys.executable, str(SCRIPT), "--model", str(tiny_checkpoint), "--quick"], capture_output=True, text=True,
                          timeout=600, env=lone_process_env())
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {line.split(" | ")[0].strip(): line.split(" | ")[1:] for line in done.stdout.splitlines() if " | " in line}
    for engine in ("transformers (folder)", "llama.cpp f16", "llama.cpp q8_0"):
        export_s, size_mb, of_folder, load_s, tokens_per_s, *_ = rows[engine]
        assert float(size_mb) > 0 and float(load_s) > 0 and float(tokens_per_s) > 0
    assert float(rows["llama.cpp q8_0"][2]) < float(rows["llama.cpp f16"][2]) < 1  # each format smaller than the last
    assert rows["llama.cpp f16"][6].strip().endswith("/32")  # the greedy match, of --quick's 32 tokens
    assert {"opening (to round 0)", "round 0", "round 1 + closing"} <= rows.keys()
    assert "Trackio" not in done.stdout and "Trackio" in done.stderr  # the trackers' own lines are progress, not the table
