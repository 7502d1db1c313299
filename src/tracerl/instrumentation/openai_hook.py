"""Exact tokens for every call the OpenAI Python SDK makes (and so LangChain, AutoGen,
the Agents SDK and anything else built on it): Chat Completions, Completions and the
Responses API (:mod:`~tracerl.instrumentation.responses_api`). The capture here
(:func:`send_captured`) serves :mod:`~tracerl.instrumentation.httpx_hook` too, and with it
the Anthropic SDK's Messages calls (:mod:`~tracerl.instrumentation.messages_api`).

Two private methods of the SDK's base client are wrapped, the narrowest waist every
request passes through: ``_build_request`` (the JSON body is still a dict: the token
fields are added there, no re-encoding) and ``_send_request`` (the raw response: the
tokens are read and the added fields removed before the SDK parses it). The LLM call's
span is whatever LLM span is current at send time (OpenLLMetry's or agentops's, when
they are active); otherwise tracerl makes it (the default: the cheapest capture).
"""

from __future__ import annotations

import functools
import importlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from opentelemetry import context, trace
from opentelemetry.instrumentation.utils import is_instrumentation_enabled
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from wrapt import wrap_function_wrapper

from tracerl.instrumentation import capture_stats, finished_span, llm_span, span_finisher
from tracerl.instrumentation.answer_readers import installed_reader
from tracerl.instrumentation.answer_split import RawTokens, split_answer
from tracerl.instrumentation.answer_stream import SSERewriter, StreamTokens
from tracerl.instrumentation.call_failure import CallFailure
from tracerl.instrumentation.call_tokens import Tokens
from tracerl.instrumentation.processor import agent_name, is_llm_span, is_sdk_call_span, llm_request_captured, llm_span_chain
from tracerl.instrumentation.request_plan import Plan, endpoint_kind, is_llm_request, plan_request
from tracerl.instrumentation.settings import settings
from tracerl.instrumentation.token_attributes import record, token_attributes
from tracerl.schemas import attributes as A

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
    _installed = True


def plan_call(kind: str, body: dict, host: str) -> tuple[Plan, dict | None]:
    """The plan of an LLM request to ``host`` and the body to send (``None``: unchanged)."""
    refusal = settings().why_not_ask_tokens(host)
    return plan_request(kind, body, refusal is None, refusal, others_read_answer=installed_reader() is not None)


def _build_request(wrapped, instance, args, kwargs):
    if not is_instrumentation_enabled():  # inside OTel's suppress_instrumentation(): record nothing
        return wrapped(*args, **kwargs)
    options = args[0] if args else kwargs["options"]
    post, url = str(options.method).lower() == "post", str(options.url)
    kind = endpoint_kind(url) if post else None
    body = options.json_data
    if kind is None or not isinstance(body, dict) or options.files:
        return wrapped(*args, **kwargs)
    if options.extra_json:
        body = {**body, **options.extra_json}
    if kind == "messages" and not is_llm_request(kind, body):  # the Assistants API's POST /threads/{id}/messages
        return wrapped(*args, **kwargs)
    plan, new_body = plan_call(kind, body, instance.base_url.host)
    if new_body is not None:
        # `options` is the SDK's own copy for this attempt: retries start again from theirs
        options.json_data, options.extra_json = new_body, None
    request = wrapped(*args, **kwargs)
    request.extensions[PLAN_EXTENSION] = (plan, body)
    return request


@functools.lru_cache(maxsize=1)
def _tracer() -> trace.Tracer:
    return trace.get_tracer("tracerl")


# Reads what a call returned: its tokens and, when asked (tracerl's own span, on the
# finisher thread), its response attributes; another instrumentation's span needs only tokens.
Read = Callable[[bool], "tuple[Tokens | None, dict[str, Any]]"]


class _Capture:
    """One LLM call in flight: its plan, its span and (for streams) the SSE rewriter.

    When another instrumentation (OpenLLMetry, agentops) made the call's span, the tokens
    go on it at once: it ends that span as soon as the SDK returns. Otherwise the span is
    tracerl's own, and all of its making is deferred off the calling thread
    (:mod:`tracerl.instrumentation.span_finisher`): here only the times, the parent context, the
    agent name (asked of the framework hooks, which read the calling thread's context) and
    the request's and response's bytes are kept. Bytes, not parsed JSON: they are immutable
    (unlike the agent's message list), and a job holding no containers adds nothing to the
    garbage collector's work while it waits.
    """

    def __init__(self, request: Any) -> None:
        self.plan, body = request.extensions[PLAN_EXTENSION]
        current = trace.get_current_span()
        fill = current.is_recording() and is_llm_span(current) and not is_sdk_call_span(current)
        self.span: Span | None = current if fill else None
        if self.span is None:
            self.start_ns = time.time_ns()
            self.parent = context.get_current()
            self.agent = agent_name(self.parent)
            self.model = body.get("model")
            self.request_body = _request_bytes(request, body)
        self._finished = False
        self.rewriter: SSERewriter | None = None
        self.stream_tokens: StreamTokens | None = None

    def response(self, response: Any) -> Any:
        """The response handed back at once (a stream, a failure), or None: read its body."""
        if self.plan.stream and response.headers.get("content-type", "").startswith("text/event-stream"):
            if response.headers.get("content-encoding", "identity") != "identity":
                self.finish()
                return response
            self.stream_tokens = StreamTokens(self.plan, response.headers)
            self.rewriter = SSERewriter(self.stream_tokens, self.finish_stream)
            response.stream = _wrap_stream(response.stream, self)
            return response
        return None  # caller reads the body (sync or async)

    def whole_body(self, response: Any) -> Any:
        """Give the SDK the body it would have had; keep the tokens, unparsed, for the span.

        On this thread the added members are only cut out
        (:func:`~tracerl.instrumentation.answer_split.split_answer`); reading the tokens
        and describing the answer happen on the finisher.
        """
        raw, split = response.content, None
        if self.plan.ask:
            split = split_answer(self.plan, raw)
            if split is None:  # not an OpenAI answer: the agent gets it as it came
                self.finish()
                return response
            response._content = split[0]
            response.headers["content-length"] = str(len(split[0]))
        version = response.headers.get(A.POLICY_VERSION_HEADER)
        self.finish(lambda describe: self._read_whole(raw, split, version, describe))
        return response

    def _read_whole(
        self, raw: bytes, split: tuple[bytes, RawTokens] | None, version: str | None, describe: bool
    ) -> tuple[Tokens | None, dict[str, Any]]:
        if split is None:  # nothing was asked for, so nothing was cut on the calling thread
            split = split_answer(self.plan, raw)
            if split is None:
                return None, {}
        body, tokens = split
        headers = {A.POLICY_VERSION_HEADER: version} if version else None
        described = llm_span.answer_attributes(self.plan.kind, body, settings().capture_content) if describe else {}
        return tokens.read(headers), described

    def finish_stream(self) -> None:
        """Record what the stream carried so far (at ``[DONE]``, its end, or its close)."""
        stream = self.stream_tokens
        self.finish(
            lambda describe: (
                stream.result(),
                llm_span.stream_attributes(stream, settings().capture_content) if describe else {},
            )
        )

    def fail(self, response: Any) -> Any:
        """An error answer, its body read: the span records the status and the server's message."""
        self.finish(failure=CallFailure.from_status(response.status_code, response.content))
        return response

    def finish(self, read: Read | None = None, failure: CallFailure | None = None) -> None:
        if self._finished:
            return
        self._finished = True
        if self.span is not None:
            if failure is None:
                tokens = read(False)[0] if read is not None else None  # its maker describes the answer
                record(llm_span_chain(self.span), self.plan, tokens, settings().token_encoding)
            return
        end_ns = time.time_ns()
        span_finisher.submit(lambda: self._make_span(read, failure, end_ns))

    def _make_span(self, read: Read | None, failure: CallFailure | None, end_ns: int) -> None:
        """tracerl's span of this call, made whole in one go (on the finisher thread)."""
        current = settings()
        kind = self.plan.kind
        try:
            request = orjson.loads(self.request_body)
        except orjson.JSONDecodeError:  # the SDK sent what orjson refuses (a NaN parameter): describe less
            request = {"model": self.model}
        attributes = llm_span.request_attributes(kind, request, current.capture_content)
        if self.agent:
            attributes[A.GEN_AI_AGENT_NAME] = self.agent
        status = Status(StatusCode.UNSET)
        if failure is None:
            tokens, described = read(True) if read is not None else (None, {})
            attributes.update(described)
            attributes.update(token_attributes(self.plan, tokens, current.token_encoding))
        else:
            status = Status(StatusCode.ERROR, failure.message())
            attributes[A.ERROR_TYPE] = failure.error_type
            capture_stats.STATS.add_failure(failure.error_type, status.description)
        name = f"{llm_span.operation(kind)} {self.model}" if self.model else llm_span.operation(kind)
        tracer = _tracer()
        if finished_span.emit(tracer, name, self.parent, SpanKind.CLIENT, attributes, self.start_ns, end_ns, status):
            return
        span = tracer.start_span(name, context=self.parent, kind=SpanKind.CLIENT, attributes=attributes, start_time=self.start_ns)
        span.set_status(status)
        span.end(end_time=end_ns)


def _request_bytes(request: Any, body: dict) -> bytes:
    """The JSON the SDK sends (its own encoding of ``body``), or ``body`` encoded now."""
    try:
        content = request.content
    except Exception:  # a request whose body is a stream, not bytes
        content = None
    return content if isinstance(content, bytes) and content else orjson.dumps(body, option=orjson.OPT_NON_STR_KEYS)


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
    return send_captured(request, lambda: wrapped(*args, **kwargs))


async def _send_request_async(wrapped, instance, args, kwargs):
    request = args[0] if args else kwargs["request"]
    if PLAN_EXTENSION not in request.extensions:
        return await wrapped(*args, **kwargs)
    return await asend_captured(request, lambda: wrapped(*args, **kwargs))


def send_captured(request: Any, send: Callable[[], Any]) -> Any:
    """Send ``request`` (an httpx request carrying its plan in ``PLAN_EXTENSION``) with
    ``send``, which must return the response unread; capture the call and hand back the
    response its client would have had."""
    capture = _Capture(request)
    in_flight = llm_request_captured.set(True)
    try:
        response = send()
    except BaseException as error:
        capture.finish(failure=CallFailure.from_exception(error))
        raise
    finally:
        llm_request_captured.reset(in_flight)
    if response.status_code >= 400:
        response.read()  # the client reads it too, to raise with the server's message
        return capture.fail(response)
    handled = capture.response(response)
    if handled is not None:
        return handled
    response.read()
    return capture.whole_body(response)


async def asend_captured(request: Any, send: Callable[[], Awaitable[Any]]) -> Any:
    """:func:`send_captured` for async clients."""
    capture = _Capture(request)
    in_flight = llm_request_captured.set(True)
    try:
        response = await send()
    except BaseException as error:
        capture.finish(failure=CallFailure.from_exception(error))
        raise
    finally:
        llm_request_captured.reset(in_flight)
    if response.status_code >= 400:
        await response.aread()  # the client reads it too, to raise with the server's message
        return capture.fail(response)
    handled = capture.response(response)
    if handled is not None:
        return handled
    await response.aread()
    return capture.whole_body(response)
