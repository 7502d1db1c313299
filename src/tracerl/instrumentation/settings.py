"""Capture settings, read once from the environment.

Every switch of the capture side is an environment variable so that an agent can be
captured with no code change (``tracerl run`` and ``opentelemetry-instrument`` only set
variables). :func:`settings` is cached; tests call ``settings.cache_clear()`` after
changing the environment.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path

from tracerl.schemas import attributes as A
from tracerl.schemas import environment as E

SDK_DEFAULT = "sdk"  # TRACERL_OPENAI_AGENTS_API unset: the Agents SDK's own default API is left alone

#: How often (ms) the batch span processor in front of tracerl's Parquet exporter hands
#: spans over (``OTEL_BSP_SCHEDULE_DELAY``; the SDK's default is 5000). Measured in steady
#: state (``benchmarks/capture_overhead.py``): at 200 ms the export thread, woken 5 times
#: a second for a dozen spans, cost ~160 us per span; at 1000 ms ~100, while the span
#: objects kept longer add ~3 us per call of garbage collection (at 5000: ~85 and ~10).
#: The exporter makes its files large on its own.
PARQUET_HANDOVER_MS = 1000

DEFAULT_DATA_DIR = "./tracerl-data"
DEFAULT_MAX_CONTENT_CHARS = 100_000

# Hosted APIs reject vLLM's extra request fields with HTTP 400, so in ``auto`` mode
# token ids are asked only from other endpoints (vLLM, tracerl's own server, ...).
HOSTED_API_SUFFIXES = (
    "api.openai.com",
    ".openai.azure.com",
    "api.anthropic.com",
    "generativelanguage.googleapis.com",
    "api.groq.com",
    "api.mistral.ai",
    "api.together.xyz",
    "api.deepseek.com",
    "openrouter.ai",
    "api.fireworks.ai",
)

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


class SettingsError(ValueError):
    """An environment variable of tracerl has a value it cannot use."""


def _choice(name: str, default: str, allowed: tuple[str, ...]) -> str:
    value = os.environ.get(name, default).strip().lower() or default
    if value not in allowed:
        raise SettingsError(f"{name}={value!r} is not one of {', '.join(allowed)}")
    return value


def _flag(name: str, default: bool) -> bool:
    value = os.environ.get(name, "").strip().lower()
    if not value:
        return default
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise SettingsError(f"{name}={value!r} is not a boolean (use true or false)")


def _positive_int(name: str, default: int) -> int:
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number <= 0:
        raise SettingsError(f"{name}={value!r} must be a positive integer")
    return number


@dataclass(frozen=True)
class Settings:
    data_dir: Path
    token_encoding: str
    token_capture: str
    capture_content: bool
    max_content_chars: int
    redact: str | None
    episode_id: str | None
    task_id: str | None
    split: str | None
    agent_name: str | None
    llm_spans: str
    openai_agents_api: str  # sdk (its own default, left alone) | chat_completions | responses
    # OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental: the deprecated GenAI names
    # (gen_ai.system) are no longer written beside their successors
    genai_latest_only: bool = False

    @property
    def spans_dir(self) -> Path:
        return self.data_dir / "spans"

    def why_not_ask_tokens(self, host: str) -> str | None:
        """Why requests to ``host`` must not ask for token ids (``None``: ask)."""
        if self.token_capture == "off":
            return f"token capture switched off ({E.TOKEN_CAPTURE_ENV}=off)"
        if self.token_capture == "on":
            return None
        if _is_hosted_api(host):
            return f"hosted API {host.lower()} cannot return token ids"
        return None


@functools.lru_cache(maxsize=256)
def _is_hosted_api(host: str) -> bool:
    """Asked on every LLM call of the agent's thread, for the few hosts an agent calls."""
    host = host.lower()
    return any(host == s.lstrip(".") or host.endswith(s) for s in HOSTED_API_SUFFIXES)


@functools.lru_cache(maxsize=1)
def settings() -> Settings:
    env = os.environ.get
    return Settings(
        data_dir=Path(env(E.DATA_DIR_ENV) or DEFAULT_DATA_DIR),
        # packed by default, measured (benchmarks/capture_token_encoding.py): the OTel SDK
        # validates array attributes element by element, so even in-process a packed
        # string is ~4x cheaper to put on a span, and ~10x cheaper to encode as OTLP.
        # `array` keeps them readable by every OTel tool.
        token_encoding=_choice(E.TOKEN_ENCODING_ENV, "packed", ("array", "packed")),
        token_capture=_choice(E.TOKEN_CAPTURE_ENV, "auto", ("auto", "on", "off")),
        capture_content=_flag(E.CAPTURE_CONTENT_ENV, True),
        max_content_chars=_positive_int(E.MAX_CONTENT_CHARS_ENV, DEFAULT_MAX_CONTENT_CHARS),
        redact=env(E.REDACT_ENV) or None,
        episode_id=env(E.EPISODE_ID_ENV) or None,
        task_id=env(E.TASK_ID_ENV) or None,
        split=env(E.SPLIT_ENV) or None,
        agent_name=env(E.AGENT_NAME_ENV) or None,
        llm_spans=_choice(E.LLM_SPANS_ENV, "tracerl", ("tracerl", "openllmetry")),
        openai_agents_api=_choice(E.OPENAI_AGENTS_API_ENV, SDK_DEFAULT, (SDK_DEFAULT, "chat_completions", "responses")),
        genai_latest_only=A.SEMCONV_GEN_AI_LATEST in [v.strip() for v in (env(E.SEMCONV_STABILITY_OPT_IN_ENV) or "").split(",")],
    )
