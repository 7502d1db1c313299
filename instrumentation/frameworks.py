"""Hooks into agent frameworks, installed lazily when the framework is imported."""

from __future__ import annotations


def install() -> None:
    """Register the post-import hooks of every supported framework (idempotent)."""
