"""``python -m tracerl`` is the ``tracerl`` command (useful where the venv's bin is not on PATH)."""

from tracerl.cli import main

main()
