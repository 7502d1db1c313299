"""Fresh virtual environments holding tracerl as a user would install it (from this checkout)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
AGENT_MODULES_ABSENT = ("duckdb", "polars", "grpc", "uvicorn", "matplotlib", "starlette", "torch")
"""What an agent's environment must not get from ``pip install tracerl`` (the other parts' modules)."""


def install_venv(folder: Path, *requirements: str) -> Path:
    """A new venv at ``folder`` after ``pip install requirements``; its python.

    ``requirements`` name this checkout as ``tracerl`` (``tracerl``, ``tracerl[pipeline]``),
    built as a wheel as pip builds any source tree; everything else comes from the package
    index, as on a user's machine.
    """
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True, timeout=120)
    python = folder / "bin" / "python"
    local = [str(REPO) + r[len("tracerl"):] if r.startswith("tracerl") else r for r in requirements]
    done = subprocess.run([str(python), "-m", "pip", "install", "-q", *local], capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"pip install {' '.join(requirements)} failed:\n{done.stderr[-3000:]}")
    return python


def importable(python: Path, modules: tuple[str, ...]) -> list[str]:
    """Which of ``modules`` the venv of ``python`` can import."""
    probe = "import importlib.util, sys; print(' '.join(m for m in sys.argv[1:] if importlib.util.find_spec(m)))"
    done = subprocess.run([str(python), "-c", probe, *modules], capture_output=True, text=True, check=True, timeout=60,
                          cwd=python.parent)
    return done.stdout.split()
