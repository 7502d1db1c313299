"""Top-level `tracerl` commands of the instrumentation part."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add this part's commands to the root `tracerl` app."""
