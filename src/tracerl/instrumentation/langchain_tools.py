"""Tool runs of LangChain and LangGraph as GenAI ``execute_tool`` spans.

LangChain makes no OTel spans of its own, so without this a LangGraph agent's tools leave
no trace and the pipeline's ``tool_error``/``sql_error`` rules have nothing to fire on.
A callback handler, added to every callback manager LangChain configures (through
``register_configure_hook`` with a context variable whose default is the handler: no
change to the agent's code), opens ``execute_tool {name}`` when a tool starts and ends it
with the result, or with ``error.type`` and the message when the tool raised or returned
an error ``ToolMessage`` (``handle_tool_error``). Arguments and result go under the
content policy like every captured content. It ignores every other LangChain event.
"""

from __future__ import annotations

import json
import threading
from contextvars import ContextVar
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.tracers.context import register_configure_hook
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from tracerl.instrumentation.call_failure import exception_type
from tracerl.schemas import attributes as A


class ToolSpans(BaseCallbackHandler):
    """Opens an ``execute_tool`` span per tool run, ends it with its result or error."""

    run_inline = True  # called where the tool runs, never from an executor: the parent context is the tool's
    # LangChain gates tool events by ignore_agent: that one stays False
    ignore_llm = ignore_chat_model = ignore_chain = ignore_retriever = ignore_retry = ignore_custom_event = True

    def __init__(self) -> None:
        self._tracer = trace.get_tracer("tracerl.langchain")
        self._open: dict[UUID, trace.Span] = {}
        self._lock = threading.Lock()

    def on_tool_start(
        self, serialized: dict[str, Any], input_str: str, *, run_id: UUID, inputs: dict[str, Any] | None = None, **kwargs: Any
    ) -> None:
        name = kwargs.get("name") or (serialized or {}).get("name") or "tool"
        attributes = {
            A.GEN_AI_OPERATION: A.GEN_AI_EXECUTE_TOOL,
            A.GEN_AI_TOOL_NAME: name,
            # the arguments as JSON (what the LLM sent), not input_str (their Python repr)
            A.GEN_AI_TOOL_CALL_ARGUMENTS_ATTRIBUTE: json.dumps(inputs, default=str) if inputs is not None else input_str,
        }
        if kwargs.get("tool_call_id"):
            attributes[A.GEN_AI_TOOL_CALL_ID] = kwargs["tool_call_id"]
        span = self._tracer.start_span(f"{A.GEN_AI_EXECUTE_TOOL} {name}", kind=SpanKind.INTERNAL, attributes=attributes)
        with self._lock:
            self._open[run_id] = span

    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        span = self._take(run_id)
        if span is None:
            return
        content = getattr(output, "content", output)  # a ToolMessage when the LLM asked for the tool
        result = content if isinstance(content, str) else str(content)
        span.set_attribute(A.GEN_AI_TOOL_CALL_RESULT, result)
        if getattr(output, "status", None) == "error":  # the tool's error, handled into its answer
            span.set_attribute(A.ERROR_TYPE, "ToolException")
            span.set_status(Status(StatusCode.ERROR, result))
        span.end()

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        span = self._take(run_id)
        if span is None:
            return
        span.set_attribute(A.ERROR_TYPE, exception_type(error))
        span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
        span.end()

    def _take(self, run_id: UUID) -> trace.Span | None:
        with self._lock:
            return self._open.pop(run_id, None)


# The configure hook adds the variable's value to every callback manager; its default is
# the handler, so every context has it without the agent setting anything.
_handler: ContextVar[ToolSpans] | None = None


def install() -> None:
    """Add :class:`ToolSpans` to every callback manager LangChain configures from now on."""
    global _handler
    if _handler is None:
        _handler = ContextVar("tracerl_tool_spans", default=ToolSpans())
        register_configure_hook(_handler, inheritable=True)
