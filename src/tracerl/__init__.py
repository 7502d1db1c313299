"""tracerl: train any LLM agent with reinforcement learning from its OpenTelemetry traces.

The user-facing API is three names: :func:`instrument` switches capture on (the same
thing ``OTEL_TRACES_EXPORTER=tracerl`` does with no code change), :func:`episode`
marks one run of an agent on one task, :func:`emit_reward` scores it. An agent trained by
tracerl's loop also reads the model name to call (:data:`POLICY_MODEL_NAME`, or
:func:`agent_model` per sub-agent). They are imported lazily so ``import tracerl`` stays cheap
for the CLI.
"""

from __future__ import annotations

from tracerl.core.lazy import lazy_attributes

__version__ = "0.1.0"
_PUBLIC = {name: "tracerl.instrumentation" for name in (
    "instrument", "episode", "emit_reward", "agent", "episode_base_url", "agent_model", "POLICY_MODEL_NAME")}
__all__ = [*_PUBLIC, "__version__"]
__getattr__ = lazy_attributes(__name__, _PUBLIC)
