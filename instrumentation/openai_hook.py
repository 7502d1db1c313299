"""Exact tokens for every call the OpenAI Python SDK makes (and so LangChain, AutoGen,
the Agents SDK and anything else built on it).

Two private methods of the SDK's base client are wrapped, the narrowest waist every
request passes through: ``_build_request`` (the JSON body is still a dict: the token
fields are added there, no re-encoding) and ``_send_request`` (the raw response: the
tokens are read and the added fields removed before the SDK parses it). The LLM call's
span is whatever LLM span is current at send time (OpenLLMetry's or agentops's, when
they are active); otherwise tracerl makes it (the default: the cheapest capture).
"""

from __future__ import annotations

import atexit
import functools
import importlib
import logging
from typing import Any

import orjson
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind
from wrapt import wrap_function_wrapper

from tracerl.instrumentation import llm_span
from tracerl.instrumentation import token_capture as tc
from tracerl.instrumentation.processor import is_llm_span, llm_span_chain
from tracerl.instrumentation.settings import settings

logger = logging.getLogger(__name__)

PLAN_EXTENSION = "tracerl.plan"
_installed = False


def install() -> None:
    """Wrap the OpenAI SDK once per process (no-op without the ``openai`` package)."""
    global _installed
    if _installed:
        return
    try:
        importlib.import_module("openai._base_client")
    except ImportError:
        return
    wrap_function_wrapper("openai._base_client", "BaseClient._build_request", _build_request)
    wrap_function_wrapper("openai._base_client", "SyncAPIClient._send_request", _send_request)
    wrap_function_wrapper("openai._base_client", "AsyncAPIClient._send_request", _send_request_async)
    atexit.register(_report)
    _installed = True


def _report() -> None:
    line = tc.STATS.report()
    if line:
        logger.warning(line)


def _build_request(wrapped, instance, args, kwargs):
    options = args[0] if args else kwargs["options"]
    kind = tc.endpoint_kind(str(options.url)) if str(options.method).lower() == "post" else None
    body = options.json_data
    if kind is None or not isinstance(body, dict) or options.files:
        return wrapped(*args, **kwargs)
    if options.extra_json:
        body = {**body, **options.extra_json}
    refusal = settings().why_not_ask_tokens(instance.base_url.host)
    plan, new_body = tc.plan_request(kind, body, refusal is None, refusal)
    if new_body is not None:
        # `options` is the SDK's own copy for this attempt: retries start again from theirs
        options.json_data, options.extra_json = new_body, None
    request = wrapped(*args, **kwargs)
    request.extensions[PLAN_EXTENSION] = (plan, body)
    return request


def _call_span(plan: tc.Plan, body: dict) -> tuple[Span, bool]:
    """The span of this LLM call and whether tracerl owns (describes and ends) it."""
    span = trace.get_current_span()
    if span.is_recording() and is_llm_span(span):
        return span, False
    attributes = llm_span.request_attributes(plan.kind, body, settings().capture_content)
    model = body.get("model")
    name = f"{llm_span.operation(plan.kind)} {model}" if model else llm_span.operation(plan.kind)
    return _tracer().start_span(name, kind=SpanKind.CLIENT, attributes=attributes), True


@functools.lru_cache(maxsize=1)
def _tracer() -> trace.Tracer:
    return trace.get_tracer("tracerl")


class _Capture:
    """One LLM call in flight: its plan, span and (for streams) the SSE rewriter."""

    def __init__(self, request: Any) -> None:
        self.plan, body = request.extensions[PLAN_EXTENSION]
        self.span, self.owned = _call_span(self.plan, body)
        self._finished = False
        self.rewriter: tc.SSERewriter | None = None
        self.stream_tokens: tc.StreamTokens | None = None

    def response(self, response: Any) -> Any:
        if response.status_code >= 400:
            self.finish(None, error=True)
            return response
        if self.plan.stream and response.headers.get("content-type", "").startswith("text/event-stream"):
            if response.headers.get("content-encoding", "identity") != "identity":
                self.finish(None)
                return response
            self.stream_tokens = tc.StreamTokens(self.plan, response.headers)
            self.rewriter = tc.SSERewriter(self.stream_tokens, self.finish_stream)
            response.stream = _wrap_stream(response.stream, self)
            return response
        return None  # caller reads the body (sync or async)

    def whole_body(self, response: Any) -> Any:
        try:
            body = orjson.loads(response.content)
        except orjson.JSONDecodeError:
            self.finish(None)
            return response
        if not isinstance(body, dict):
            self.finish(None)
            return response
        tokens = tc.take_tokens(self.plan, body, response.headers)
        if self.owned:
            self.span.set_attributes(llm_span.response_attributes(self.plan.kind, body, settings().capture_content))
        if self.plan.ask:
            content = orjson.dumps(body)
            response._content = content
            response.headers["content-length"] = str(len(content))
        self.finish(tokens)
        return response

    def finish_stream(self) -> None:
        """Record what the stream carried so far (at ``[DONE]``, its end, or its close)."""
        if self.owned and not self._finished:
            self.span.set_attributes(llm_span.stream_attributes(self.stream_tokens, settings().capture_content))
        self.finish(self.stream_tokens.result())

    def finish(self, tokens: tc.Tokens | None, error: bool = False) -> None:
        if self._finished:
            return
        self._finished = True
        if not error:
            tc.record(llm_span_chain(self.span), self.plan, tokens, settings().token_encoding)
        if self.owned:
            if error:
                self.span.set_status(trace.StatusCode.ERROR)
            self.span.end()


def _stream_base(name: str) -> tuple[type, ...]:
    bases = []
    for module in ("httpx2", "httpx"):
        try:
            bases.append(getattr(importlib.import_module(module), name))
        except (ImportError, AttributeError):
            continue
    return tuple(bases) or (object,)


class _SyncStream(*_stream_base("SyncByteStream")):
    def __init__(self, inner: Any, capture: _Capture) -> None:
        self._inner = inner
        self._capture = capture

    def __iter__(self):
        return self._capture.rewriter.rewrite(self._inner)

    def close(self) -> None:
        self._capture.finish_stream()
        self._inner.close()


class _AsyncStream(*_stream_base("AsyncByteStream")):
    def __init__(self, inner: Any, capture: _Capture) -> None:
        self._inner = inner
        self._capture = capture

    def __aiter__(self):
        return self._capture.rewriter.arewrite(self._inner)

    async def aclose(self) -> None:
        self._capture.finish_stream()
        await self._inner.aclose()


def _wrap_stream(inner: Any, capture: _Capture) -> Any:
    return _AsyncStream(inner, capture) if hasattr(inner, "__aiter__") else _SyncStream(inner, capture)


def _send_request(wrapped, instance, args, kwargs):
    request = args[0] if args else kwargs["request"]
    if PLAN_EXTENSION not in request.extensions:
        return wrapped(*args, **kwargs)
    capture = _Capture(request)
    try:
        response = wrapped(*args, **kwargs)
    except BaseException:
        capture.finish(None, error=True)
        raise
    handled = capture.response(response)
    if handled is not None:
        return handled
    response.read()
    return capture.whole_body(response)


async def _send_request_async(wrapped, instance, args, kwargs):
    request = args[0] if args else kwargs["request"]
    if PLAN_EXTENSION not in request.extensions:
        return await wrapped(*args, **kwargs)
    capture = _Capture(request)
    try:
        response = await wrapped(*args, **kwargs)
    except BaseException:
        capture.finish(None, error=True)
        raise
    handled = capture.response(response)
    if handled is not None:
        return handled
    await response.aread()
    return capture.whole_body(response)
