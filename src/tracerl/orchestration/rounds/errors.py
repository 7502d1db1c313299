"""How a scheduled round ends early: stopped between phases, or a phase failed (its status says which)."""

from __future__ import annotations


class RoundStopped(Exception):
    """Asked to stop (SIGTERM to ``tracerl train loop``) between two phases; the next run continues."""


class RoundFailed(RuntimeError):
    """A phase failed; ``status`` is the summary's status for it."""

    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = status
