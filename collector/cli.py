"""`tracerl collector` commands."""

from __future__ import annotations

import typer

app = typer.Typer(no_args_is_help=True, add_completion=False)


def main() -> None:
    """Console-script entry point (`collector ...` equals `tracerl collector ...`)."""
    app()
