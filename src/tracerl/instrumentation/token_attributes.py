"""A call's tokens as span attributes (or, for a call without them, the reason why).

Token arrays are packed (``tokpack:`` strings) or plain int arrays, as
``TRACERL_TOKEN_ENCODING`` says; ids are checked to be int32 on the way: a server's
malformed ids make a call without token ids, never an error. Every call is counted in
:data:`~tracerl.instrumentation.capture_stats.STATS`.
"""

from __future__ import annotations

import array
from collections.abc import Iterable
from typing import Any

from opentelemetry.trace import Span

from tracerl.instrumentation import capture_stats
from tracerl.instrumentation.call_tokens import Tokens
from tracerl.instrumentation.request_plan import Plan
from tracerl.schemas import attributes as A
from tracerl.schemas.tokens import pack_floats, pack_ids


def missing_reason(plan: Plan, tokens: Tokens | None) -> str | None:
    """Why a call has no exact tokens (the span attribute's value and the count's key), or
    ``None`` when it has them."""
    if not plan.ask:
        return plan.reason or "token ids not requested"
    if tokens is None:
        return "no response body"
    if tokens.prompt_ids is None or tokens.completion_ids is None:
        return "server returned no token ids (not vLLM or tracerl serve?)"
    return None


def token_attributes(plan: Plan, tokens: Tokens | None, encoding: str) -> dict[str, Any]:
    """The span attributes of a call's tokens (or of why it has none); counts the call in
    :data:`~tracerl.instrumentation.capture_stats.STATS`."""
    if tokens is not None:  # a server's malformed ids make a call without token ids, never an error
        tokens.prompt_ids = _int32_ids(tokens.prompt_ids)
        tokens.completion_ids = _int32_ids(tokens.completion_ids)
    reason = missing_reason(plan, tokens)
    capture_stats.STATS.add(reason)
    attributes: dict[str, Any] = {}
    if tokens is not None:
        packed = encoding == "packed"
        for key, ids in ((A.PROMPT_TOKEN_IDS, tokens.prompt_ids), (A.COMPLETION_TOKEN_IDS, tokens.completion_ids)):
            if ids is not None:
                attributes[key] = pack_ids(ids) if packed else ids.tolist()
        if tokens.logprobs is not None:
            lps = tokens.logprobs
            attributes[A.COMPLETION_LOGPROBS] = pack_floats(lps) if packed else lps
        if tokens.policy_version is not None:
            attributes[A.POLICY_VERSION] = tokens.policy_version
    if reason is not None:
        attributes[A.TOKEN_IDS_MISSING] = reason
    return attributes


def _int32_ids(ids: object) -> array.array | None:
    """A server's token ids, checked: ``None`` unless a list of int32 (a float, a string or
    an id beyond int32 makes the call one without token ids)."""
    if not isinstance(ids, (list, array.array)):
        return None
    try:
        return array.array("i", ids)
    except (TypeError, OverflowError):
        return None


def record(spans: Iterable[Span], plan: Plan, tokens: Tokens | None, encoding: str) -> None:
    """Count the call and put its token attributes on ``spans`` (one per instrumentation
    layer that made a span for this call)."""
    attributes = token_attributes(plan, tokens, encoding)
    for span in spans:
        if span.is_recording():
            span.set_attributes(attributes)
