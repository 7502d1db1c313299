"""tracerl: train any LLM agent with reinforcement learning from its OpenTelemetry traces.

The user-facing API is three names: :func:`instrument` switches capture on (the same
thing ``OTEL_TRACES_EXPORTER=tracerl`` does with no code change), :func:`episode`
marks one run of an agent on one task, :func:`emit_reward` scores it. They are
imported lazily so ``import tracerl`` stays cheap for the CLI.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["instrument", "episode", "emit_reward", "agent", "episode_base_url", "__version__"]


def __getattr__(name: str) -> Any:
    if name in ("instrument", "episode", "emit_reward", "agent", "episode_base_url"):
        from tracerl import instrumentation

        return getattr(instrumentation, name)
    raise AttributeError(f"module 'tracerl' has no attribute {name!r}")
