"""Capture: OTel setup from env vars, the Parquet span exporter, the episode and reward
API, exact token ids from OpenAI-compatible servers, framework hooks, the gateway.

``instrument()``, ``episode()``, ``emit_reward()`` and ``agent()`` are the public
names (also reachable as ``tracerl.<name>``), with what a trained agent reads of the loop:
``POLICY_MODEL_NAME`` and ``agent_model()`` (``agent_env``). They are imported on first use
so that the ``tracerl`` CLI and the OTel entry points stay quick to load.
"""

from __future__ import annotations

from tracerl.core.lazy import lazy_attributes

_PUBLIC = {
    "POLICY_MODEL_NAME": "tracerl.instrumentation.agent_env",
    "agent_model": "tracerl.instrumentation.agent_env",
    "Episode": "tracerl.instrumentation.episodes",
    "agent": "tracerl.instrumentation.episodes",
    "emit_reward": "tracerl.instrumentation.episodes",
    "episode": "tracerl.instrumentation.episodes",
    "episode_base_url": "tracerl.instrumentation.episodes",
    "instrument": "tracerl.instrumentation.setup",
}
__all__ = sorted(_PUBLIC)
__getattr__ = lazy_attributes(__name__, _PUBLIC)
