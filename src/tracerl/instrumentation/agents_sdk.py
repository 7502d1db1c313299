"""The OpenAI Agents SDK's own tracing, turned into OTel spans (nothing goes to OpenAI).

The SDK reports traces and spans to its trace processors; this one opens an OTel span
for each and makes it current, so the OpenAI client calls an agent makes (captured,
with exact tokens, as OpenLLMetry spans) nest under ``invoke_agent <name>`` and inherit
its ``gen_ai.agent.name``. The SDK's generation/response spans describe those same
calls, so they get no span of their own: one LLM call, one span.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

from agents.tracing import Span as AgentsSpan
from agents.tracing import Trace, TracingProcessor
from opentelemetry import context, trace
from opentelemetry.trace import Status, StatusCode
from wrapt import wrap_function_wrapper

from tracerl.instrumentation import capture_stats
from tracerl.schemas import attributes as A

logger = logging.getLogger(__name__)

_SKIPPED = frozenset({"generation", "response"})  # the LLM call has its own OpenLLMetry span


def _describe(data: Any) -> tuple[str, dict[str, Any]]:
    """Span name and attributes (GenAI conventions) for one Agents SDK span."""
    kind = getattr(data, "type", "custom")
    name = getattr(data, "name", None)
    if kind == "agent":
        attrs: dict[str, Any] = {A.GEN_AI_OPERATION: A.GEN_AI_INVOKE_AGENT, A.GEN_AI_AGENT_NAME: name}
        if getattr(data, "tools", None):
            attrs[A.OPENAI_AGENTS_TOOLS] = list(data.tools)
        if getattr(data, "handoffs", None):
            attrs[A.OPENAI_AGENTS_HANDOFFS] = list(data.handoffs)
        return f"{A.GEN_AI_INVOKE_AGENT} {name}", attrs
    if kind == "function":
        return f"{A.GEN_AI_EXECUTE_TOOL} {name}", {A.GEN_AI_OPERATION: A.GEN_AI_EXECUTE_TOOL, A.GEN_AI_TOOL_NAME: name}
    if kind == "handoff":
        attrs = {A.OPENAI_AGENTS_HANDOFF_FROM: data.from_agent or "", A.OPENAI_AGENTS_HANDOFF_TO: data.to_agent or ""}
        return f"handoff {data.from_agent} -> {data.to_agent}", attrs
    if kind == "guardrail":
        return f"guardrail {name}", {A.OPENAI_AGENTS_GUARDRAIL_TRIGGERED: bool(data.triggered)}
    return f"{kind} {name}" if name else str(kind), {}


def _finish_attributes(data: Any) -> dict[str, Any]:
    kind = getattr(data, "type", None)
    if kind == "function":
        return {
            A.GEN_AI_TOOL_CALL_ARGUMENTS_ATTRIBUTE: str(data.input or ""),
            A.GEN_AI_TOOL_CALL_RESULT: str(data.output if data.output is not None else ""),
        }
    if kind == "agent" and getattr(data, "output_type", None):
        return {A.OPENAI_AGENTS_OUTPUT_TYPE: str(data.output_type)}
    if kind == "custom" and getattr(data, "data", None):
        return {A.OPENAI_AGENTS_DATA: json.dumps(data.data, default=str)}
    return {}


class OTelTraceProcessor(TracingProcessor):
    """An Agents SDK trace processor that opens OTel spans instead of uploading."""

    def __init__(self) -> None:
        self._tracer = trace.get_tracer("tracerl.agents_sdk")
        self._open: dict[str, tuple[trace.Span, object]] = {}
        self._lock = threading.Lock()

    def _start(self, key: str, name: str, attributes: dict[str, Any]) -> None:
        span = self._tracer.start_span(name, attributes={k: v for k, v in attributes.items() if v is not None})
        token = context.attach(trace.set_span_in_context(span))
        with self._lock:
            self._open[key] = (span, token)

    def _end(self, key: str, attributes: dict[str, Any], error: Any = None, name: str | None = None) -> None:
        with self._lock:
            entry = self._open.pop(key, None)
        if entry is None:
            return
        span, token = entry
        if name is not None:
            span.update_name(name)  # a handoff learns its target only when it ends
        span.set_attributes({k: v for k, v in attributes.items() if v is not None})
        if error:
            message = error.get("message") if isinstance(error, dict) else str(error)
            span.set_status(Status(StatusCode.ERROR, message))
        try:
            context.detach(token)
        finally:
            span.end()

    def on_trace_start(self, trace: Trace) -> None:
        self._start(trace.trace_id, f"workflow {trace.name}", {A.OPENAI_AGENTS_TRACE_ID: trace.trace_id})

    def on_trace_end(self, trace: Trace) -> None:
        self._end(trace.trace_id, {})

    def on_span_start(self, span: AgentsSpan[Any]) -> None:
        if span.span_data.type in _SKIPPED:
            return
        name, attributes = _describe(span.span_data)
        self._start(span.span_id, name, attributes)

    def on_span_end(self, span: AgentsSpan[Any]) -> None:
        if span.span_data.type in _SKIPPED:
            return
        name, attributes = _describe(span.span_data)
        self._end(span.span_id, {**attributes, **_finish_attributes(span.span_data)}, span.error, name)

    def shutdown(self) -> None:
        with self._lock:
            keys = list(self._open)
        for key in keys:
            self._end(key, {})

    def force_flush(self) -> None:
        pass


# ---- set_tracing_disabled ---------------------------------------------------------------

TRACING_KEPT_ON = (
    "the OpenAI Agents SDK's tracing was switched off (set_tracing_disabled, RunConfig.tracing_disabled or "
    "OPENAI_AGENTS_DISABLE_TRACING); tracerl kept it on for its own trace processor, the only one installed "
    "(nothing goes to OpenAI), so agent names, tool and handoff spans are recorded"
)
TRACING_LOST = (
    "the OpenAI Agents SDK's tracing is switched off and tracerl could not keep it on for its processor "
    "(agents {version}): LLM calls have no agent names and its tools make no spans; remove set_tracing_disabled"
)


def keep_tracing_for_tracerl(provider_class: type) -> bool:
    """Keep the SDK's tracing on while tracerl's processor is the only one.

    Every model-provider example of the SDK calls ``set_tracing_disabled(True)``, to stop
    the default uploader sending traces to OpenAI without a key. tracerl has replaced that
    uploader, and without tracing the agent names and tool spans are lost; so as long as
    the provider's processors are tracerl's alone, "disabled" is not passed on (a
    processor the agent adds itself makes the switch count again). Reads the provider's
    ``_multi_processor._processors`` and ``_disabled`` (SDK internals): False when they are
    not there, and the caller says so.
    """
    if not all(hasattr(provider_class, name) for name in ("_refresh_disabled_flag", "create_trace", "create_span")):
        return False

    def only_tracerl(provider: Any) -> bool:
        processors = getattr(getattr(provider, "_multi_processor", None), "_processors", None)
        return bool(processors) and all(isinstance(p, OTelTraceProcessor) for p in processors)

    def refresh(wrapped, instance, args, kwargs):
        wrapped(*args, **kwargs)
        if getattr(instance, "_disabled", False) and only_tracerl(instance):
            instance._disabled = False
            capture_stats.STATS.add_note(TRACING_KEPT_ON)

    def create(wrapped, instance, args, kwargs):
        if kwargs.get("disabled") and only_tracerl(instance):
            kwargs = {**kwargs, "disabled": False}
            capture_stats.STATS.add_note(TRACING_KEPT_ON)
        return wrapped(*args, **kwargs)

    wrap_function_wrapper(provider_class, "_refresh_disabled_flag", refresh)
    wrap_function_wrapper(provider_class, "create_trace", create)
    wrap_function_wrapper(provider_class, "create_span", create)
    return True
