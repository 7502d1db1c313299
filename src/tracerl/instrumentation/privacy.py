"""What may be recorded: the content switch, the redaction hook, the size limit, secrets.

The rules are applied where attributes are *set* (every write to a span's attributes
passes through :meth:`ContentPolicy.clean`: the tracerl span processor installs it on each
span as it starts, see :func:`tracerl.instrumentation.sdk_internals.filter_attribute_writes`),
so they hold for every exporter, not only tracerl's: a secret that never enters a span
cannot leak through the console exporter or an OTLP collector either.
"""

from __future__ import annotations

import functools
import importlib
import re
from collections.abc import Callable

from tracerl.instrumentation.settings import Settings, SettingsError
from tracerl.schemas import attributes as A

# Attribute keys (prefixes) that carry prompts, completions or tool payloads, in every
# convention the pipeline reads.
CONTENT_PREFIXES = (
    A.GEN_AI_INPUT_MESSAGES,
    A.GEN_AI_OUTPUT_MESSAGES,
    A.GEN_AI_SYSTEM_INSTRUCTIONS,
    A.GEN_AI_TOOL_DEFINITIONS,
    A.GEN_AI_TOOL_CALL_ARGUMENTS_ATTRIBUTE,
    A.GEN_AI_TOOL_CALL_RESULT,
    A.OPENLLMETRY_PROMPTS,
    A.OPENLLMETRY_COMPLETIONS,
    A.OPENLLMETRY_LEGACY_PROMPTS,
    A.OPENLLMETRY_LEGACY_COMPLETIONS,
    A.TRACELOOP_ENTITY_INPUT,
    A.TRACELOOP_ENTITY_OUTPUT,
    A.OPENINFERENCE_INPUT_MESSAGES,
    A.OPENINFERENCE_OUTPUT_MESSAGES,
    A.OPENINFERENCE_INPUT_VALUE,
    A.OPENINFERENCE_OUTPUT_VALUE,
    A.CONTENT_PREFIX,
)
# Keys that name credentials: never recorded, whatever the value.
_SECRET_KEY = re.compile(r"(authorization|api[-_.]?key|x-api-key|cookie|secret|password|bearer)", re.I)
# Credential-looking values inside content (OpenAI/Anthropic keys, bearer tokens).
_SECRET_VALUE = re.compile(r"(sk-[A-Za-z0-9_\-]{16,}|Bearer\s+[A-Za-z0-9._\-~+/]{16,}=*)")
# The OpenAI SDK's "argument not given" markers, which instrumentations copy verbatim.
_SENTINELS = frozenset({"Omit", "NotGiven"})
REDACTED = "[REDACTED]"


def is_content_key(key: str) -> bool:
    return key.startswith(CONTENT_PREFIXES)


def is_secret_key(key: str) -> bool:
    return bool(_SECRET_KEY.search(key))


@functools.lru_cache(maxsize=4096)
def _key_kind(key: str) -> str:
    """``secret``, ``content`` or ``plain``: cached, since every attribute write of every
    span asks, and a process uses few distinct keys."""
    if is_secret_key(key):
        return "secret"
    return "content" if is_content_key(key) else "plain"


def load_redactor(spec: str | None) -> Callable[[str, str], str] | None:
    """Import the ``module:function`` hook named by ``TRACERL_REDACT``.

    The hook is called as ``hook(key, text)`` for every captured content string and
    returns the text to record (for example with e-mail addresses masked).
    """
    if not spec:
        return None
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise SettingsError(f"TRACERL_REDACT={spec!r} must look like 'package.module:function'")
    try:
        hook = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise SettingsError(f"TRACERL_REDACT={spec!r} cannot be loaded: {exc}") from exc
    if not callable(hook):
        raise SettingsError(f"TRACERL_REDACT={spec!r} is not callable")
    return hook


class ContentPolicy:
    """Decide, attribute by attribute, what is recorded."""

    def __init__(self, settings: Settings) -> None:
        self.capture_content = settings.capture_content
        self.max_chars = settings.max_content_chars
        self.redactor = load_redactor(settings.redact)

    def clean(self, key: str, value: object) -> object | None:
        """The value to record for ``key``, or ``None`` to record nothing."""
        kind = _key_kind(key)
        if kind == "secret" or type(value).__name__ in _SENTINELS:
            return None
        if kind == "plain":
            return value
        if not self.capture_content:
            return None
        if isinstance(value, str):
            return self._clean_text(key, value)
        if isinstance(value, (list, tuple)) and value and isinstance(value[0], str):
            return [self._clean_text(key, v) for v in value]
        return value

    def _clean_text(self, key: str, text: str) -> str:
        if "sk-" in text or "Bearer" in text:  # ~10x cheaper than letting the regex scan
            text = _SECRET_VALUE.sub(REDACTED, text)
        if self.redactor is not None:
            text = self.redactor(key, text)
        if len(text) > self.max_chars:
            text = text[: self.max_chars] + A.TRUNCATED_MARK
        return text
