"""Runs peft_adapter.py (beside this file) in vLLM's environment, which has peft; tracerl's has not."""

from __future__ import annotations

import subprocess
from pathlib import Path

SCRIPT = Path(__file__).with_name("peft_adapter.py")


def run_peft_adapter(python: str, *args: str) -> str:
    """``python peft_adapter.py ARGS``; its stdout, or an error carrying its stderr."""
    done = subprocess.run([python, str(SCRIPT), *args], capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"peft_adapter.py {args[0]} failed:\n{done.stderr[-3000:]}")
    return done.stdout
