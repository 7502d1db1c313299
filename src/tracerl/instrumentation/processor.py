"""The span processor that stamps episode context and the agent name on every span.

Episode attributes (episode id, task id, split, agent override) travel as W3C baggage,
so they reach spans in other processes through ordinary context propagation; this
processor copies them from the parent context onto each span when it starts. The agent
name (``gen_ai.agent.name``) is inherited from the parent span, or asked of the
framework hooks (a LangGraph node, for instance), so every LLM call knows which
(sub-)agent made it.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from typing import Any
from urllib.parse import urlsplit

from opentelemetry import baggage, trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.trace import SpanKind

from tracerl.instrumentation import capture_stats, span_finisher
from tracerl.instrumentation.privacy import ContentPolicy
from tracerl.instrumentation.request_plan import MESSAGES_PATH, RESPONSES_PATH, endpoint_kind
from tracerl.instrumentation.sdk_internals import filter_attribute_writes
from tracerl.instrumentation.settings import Settings
from tracerl.schemas import attributes as A

AgentNameResolver = Callable[[], "str | None"]

# Framework hooks register a function returning the agent running now (or None).
_agent_name_resolvers: list[AgentNameResolver] = []


def add_agent_name_resolver(resolver: AgentNameResolver) -> None:
    if resolver not in _agent_name_resolvers:
        _agent_name_resolvers.append(resolver)


_LLM_OPERATIONS = frozenset(A.LLM_OPERATIONS)
_REQUEST_TYPE_KEYS = (A.OPENLLMETRY_REQUEST_TYPE, A.AGENTOPS_REQUEST_TYPE)  # older layouts
# LLM-call spans in flight, by span id: stacked instrumentations (OpenLLMetry inside
# agentops, say) each open one for the same call, and each must get its tokens.
_llm_spans: weakref.WeakValueDictionary[int, Span] = weakref.WeakValueDictionary()


def is_llm_span(span: object) -> bool:
    """An LLM-call span (OpenLLMetry, agentops, tracerl), not an agent or tool span."""
    attributes = getattr(span, "attributes", None)
    if not attributes:
        return False
    if attributes.get(A.GEN_AI_OPERATION) in _LLM_OPERATIONS:
        return True
    return any(attributes.get(key) in _LLM_OPERATIONS for key in _REQUEST_TYPE_KEYS)


def is_sdk_call_span(span: object) -> bool:
    """A span an LLM client SDK makes itself around each of its calls (the Anthropic SDK's, with
    metadata only: no messages, no tokens): tracerl makes the call's LLM-call span under it instead
    of filling it; the pipeline merges the two by response id."""
    scope = getattr(span, "instrumentation_scope", None)
    return getattr(scope, "name", None) == A.ANTHROPIC_SDK_SCOPE


# True while an LLM hook (openai_hook) sends a request it captures: the HTTP client span
# started inside is that call's transport; an LLM request's HTTP span outside is unrecognised.
llm_request_captured: ContextVar[bool] = ContextVar("tracerl_llm_request_captured", default=False)


def _http_llm_request(span: Span) -> str | None:
    """``METHOD url`` of an HTTP client span that posts to an LLM endpoint, else None."""
    attributes = span.attributes
    method = attributes.get(A.HTTP_REQUEST_METHOD) or attributes.get(A.HTTP_METHOD_OLD)
    if method != "POST":
        return None
    url = attributes.get(A.URL_FULL) or attributes.get(A.HTTP_URL_OLD)
    if not isinstance(url, str):
        return None
    path = urlsplit(url).path
    kind = endpoint_kind(path)
    if kind is None or (kind == "responses" and not path.endswith("/v1" + RESPONSES_PATH)):  # another service's /responses
        return None
    if kind == "messages" and not path.endswith("/v1" + MESSAGES_PATH):  # OpenAI's /threads/{id}/messages, another service's
        return None
    return f"{method} {url.split('?', 1)[0]}"


def llm_span_chain(span: Span) -> Iterator[Span]:
    """``span`` and the LLM-call spans it is nested in, innermost first."""
    while span is not None:
        yield span
        parent = getattr(span, "parent", None)
        span = _llm_spans.get(parent.span_id) if parent is not None else None


def agent_name(parent_context: Context | None = None) -> str | None:
    """The (sub-)agent a span started now under ``parent_context`` belongs to: the parent
    span's agent, else what a framework hook says is running (read from the current
    execution context, so it must be asked on the thread that makes the call)."""
    parent = trace.get_current_span(parent_context)
    parent_attributes = getattr(parent, "attributes", None)
    if parent_attributes:
        name = parent_attributes.get(A.GEN_AI_AGENT_NAME)
        if name:
            return name
    for resolver in _agent_name_resolvers:
        name = resolver()
        if name:
            return name
    return None


class TracerlSpanProcessor(SpanProcessor):
    """Copy episode baggage and the agent name onto spans; police their attributes."""

    def __init__(self, settings: Settings) -> None:
        self._policy = ContentPolicy(settings)
        # Process-wide episode set by `tracerl run --task-id ...`: baggage still wins.
        self._defaults = {
            A.EPISODE_ID: settings.episode_id,
            A.TASK_ID: settings.task_id,
            A.SPLIT: settings.split,
            A.AGENT_NAME: settings.agent_name,
        }

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        filter_attribute_writes(span, self._policy)
        for key, value in self._stamps(span.attributes or {}, parent_context).items():
            span.set_attribute(key, value)
        if is_llm_span(span):
            _llm_spans[span.context.span_id] = span
        elif span.kind is SpanKind.CLIENT and span.attributes and (request := _http_llm_request(span)):
            self._mark_http_llm_request(span, request)

    @staticmethod
    def _mark_http_llm_request(span: Span, request: str) -> None:
        if llm_request_captured.get():
            span.set_attribute(A.HTTP_LLM_REQUEST, A.HTTP_LLM_REQUEST_CAPTURED)
            capture_stats.STATS.add_http_llm_span(A.HTTP_LLM_REQUEST_CAPTURED)
        else:
            span.set_attribute(A.HTTP_LLM_REQUEST, A.HTTP_LLM_REQUEST_UNRECOGNISED)
            capture_stats.STATS.add_http_llm_span(A.HTTP_LLM_REQUEST_UNRECOGNISED, request)

    def finished_attributes(self, attributes: Mapping[str, Any], parent_context: Context | None) -> dict[str, Any]:
        """The attributes a span started with ``attributes`` would have once through
        :meth:`on_start`, for a span handed to the processors already over
        (:mod:`tracerl.instrumentation.finished_span`)."""
        clean = self._policy.clean
        kept = {key: cleaned for key, value in attributes.items() if (cleaned := clean(key, value)) is not None}
        for key, value in self._stamps(kept, parent_context).items():
            if (cleaned := clean(key, value)) is not None:
                kept[key] = cleaned
        return kept

    def _stamps(self, present: Mapping[str, Any], parent_context: Context | None) -> dict[str, str]:
        """Episode baggage and the agent name, where ``present`` lacks them."""
        stamps = {}
        entries = baggage.get_all(parent_context)
        for key in A.BAGGAGE_KEYS:
            value = entries.get(key) or self._defaults[key]
            if value is not None and key not in present:
                stamps[key] = str(value)
        if A.GEN_AI_AGENT_NAME not in present:
            name = agent_name(parent_context)
            if name:
                stamps[A.GEN_AI_AGENT_NAME] = name
        return stamps

    def on_end(self, span: ReadableSpan) -> None:
        capture_stats.STATS.add_span()

    # Runs first among the provider's processors (see ``setup.install_hooks``): the LLM-call
    # spans still being finished off the calling thread must end before the exporting
    # processors flush or shut down.
    def shutdown(self) -> None:
        span_finisher.drain()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return span_finisher.drain(timeout_millis / 1000)
