"""``tracerl gateway``: an OpenAI-compatible reverse proxy that records every call (Chat
Completions, Completions, the Responses API, and Anthropic's Messages API at ``/v1/messages``).

For agents that cannot be instrumented (other languages, closed binaries): point
their base URL at the gateway and it forwards each request to the upstream server
(vLLM, ``tracerl serve``, ...), asking for token ids and log-probs exactly as the
in-process hook does, and records one span per call with the exact tokens. The agent
gets the upstream's answer minus what was added: same status, same body, same
streaming; upstream errors pass through unchanged. W3C ``traceparent``/``baggage``
headers sent by the agent put the call in its trace and episode; a client that sends
none (LiteLLM, most agents in other languages) calls an episode-scoped base URL instead,
``/e/<token>/v1`` (``Episode.base_url``), whose token carries the same context.
Credentials are forwarded upstream and never recorded.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.trace import SpanKind, Status, StatusCode
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tracerl.instrumentation import llm_span
from tracerl.instrumentation.answer_split import split_answer
from tracerl.instrumentation.answer_stream import SSERewriter, StreamTokens
from tracerl.instrumentation.episodes import EpisodeTokenError, context_from_token
from tracerl.instrumentation.processor import llm_request_captured
from tracerl.instrumentation.request_plan import Plan, endpoint_kind, is_llm_request, plan_request
from tracerl.instrumentation.token_attributes import record
from tracerl.schemas import attributes as A
from tracerl.instrumentation.settings import settings

# Hop-by-hop and body-framing headers: recomputed on each side, never copied.
_DROP_HEADERS = frozenset(
    {"host", "content-length", "content-encoding", "transfer-encoding", "connection", "keep-alive", "accept-encoding"}
)


def _forward_headers(headers: Any) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k.lower() not in _DROP_HEADERS}


_EPISODE_PREFIX = f"/{A.GATEWAY_EPISODE_PATH}/"


def _episode_scope(path: str) -> tuple[str, Context | None]:
    """``/e/TOKEN/v1/chat/completions`` -> (``/v1/chat/completions``, the token's context)."""
    if not path.startswith(_EPISODE_PREFIX):
        return path, None
    token, _, rest = path[len(_EPISODE_PREFIX):].partition("/")
    return "/" + rest, context_from_token(token)


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": "tracerl_gateway_error", "code": status}}, status)


class Gateway:
    """The proxy: one shared upstream connection pool, one span per LLM call."""

    def __init__(self, upstream: str, timeout_s: float = 600.0) -> None:
        # agents call the gateway with OpenAI paths (/v1/chat/completions), forwarded as is
        self.upstream = upstream.rstrip("/").removesuffix("/v1")
        self.client = httpx.AsyncClient(base_url=self.upstream, timeout=timeout_s)
        self.tracer = trace.get_tracer("tracerl.gateway")
        self.app = Starlette(
            routes=[Route("/{path:path}", self.handle, methods=["GET", "POST", "PUT", "DELETE", "PATCH"])],
            lifespan=self._lifespan,
        )

    @asynccontextmanager
    async def _lifespan(self, app: Starlette) -> AsyncIterator[None]:
        yield
        await self.client.aclose()

    async def handle(self, request: Request) -> Response:
        try:
            path, episode = _episode_scope("/" + request.path_params["path"])
        except EpisodeTokenError as exc:
            return _error(400, f"tracerl gateway: {exc}; call the base URL that Episode.base_url() returned")
        body = await request.body()
        kind = endpoint_kind(path) if request.method == "POST" else None
        parsed = None
        if kind is not None:
            try:
                parsed = orjson.loads(body) if body else None
            except orjson.JSONDecodeError:
                parsed = None  # not ours to judge: the upstream answers it
        if not isinstance(parsed, dict) or not is_llm_request(kind, parsed):
            return await self._pass_through(request, path, body)
        return await self._llm_call(request, path, kind, parsed, episode)

    async def _send(self, request: Request, path: str, content: bytes) -> httpx.Response | JSONResponse:
        upstream_request = self.client.build_request(
            request.method, path, params=request.query_params, headers=_forward_headers(request.headers), content=content
        )
        in_flight = llm_request_captured.set(True)  # the gateway makes the call's span, not httpx_hook
        try:
            return await self.client.send(upstream_request, stream=True)
        except httpx.HTTPError as exc:
            return _error(502, f"tracerl gateway: upstream {self.upstream} unreachable: {exc!r}")
        finally:
            llm_request_captured.reset(in_flight)

    async def _pass_through(self, request: Request, path: str, body: bytes) -> Response:
        upstream = await self._send(request, path, body)
        if isinstance(upstream, JSONResponse):
            return upstream
        return StreamingResponse(
            upstream.aiter_bytes(),
            status_code=upstream.status_code,
            headers=_forward_headers(upstream.headers),
            background=BackgroundTask(upstream.aclose),
        )

    async def _llm_call(self, request: Request, path: str, kind: str, body: dict, episode: Context | None) -> Response:
        refusal = settings().why_not_ask_tokens(httpx.URL(self.upstream).host)
        plan, new_body = plan_request(kind, body, refusal is None, refusal)
        model = body.get("model")
        operation = llm_span.operation(kind)
        span = self.tracer.start_span(
            f"{operation} {model}" if model else operation,
            context=episode if episode is not None else propagate.extract(request.headers),
            kind=SpanKind.CLIENT,
            attributes=llm_span.request_attributes(kind, body, settings().capture_content),
        )
        content = orjson.dumps(new_body) if new_body is not None else await request.body()
        upstream = await self._send(request, path, content)
        if isinstance(upstream, JSONResponse):
            span.set_status(Status(StatusCode.ERROR, "upstream unreachable"))
            span.end()
            return upstream
        headers = _forward_headers(upstream.headers)
        if upstream.status_code >= 400:
            data = await upstream.aread()
            await upstream.aclose()
            span.set_attribute(A.HTTP_RESPONSE_STATUS_CODE, upstream.status_code)
            span.set_status(Status(StatusCode.ERROR, data[:200].decode("utf-8", "replace")))
            span.end()
            return Response(data, status_code=upstream.status_code, headers=headers)
        if plan.stream and upstream.headers.get("content-type", "").startswith("text/event-stream"):
            return StreamingResponse(
                self._stream(upstream, plan, span), status_code=upstream.status_code, headers=headers
            )
        data = await upstream.aread()
        await upstream.aclose()
        return self._whole(data, upstream, plan, span, headers)

    def _whole(self, data: bytes, upstream: httpx.Response, plan: Plan, span: Any, headers: dict) -> Response:
        split = split_answer(plan, data)
        if split is None:
            record([span], plan, None, settings().token_encoding)
            span.end()
            return Response(data, status_code=upstream.status_code, headers=headers)
        body, tokens = split
        span.set_attributes(llm_span.answer_attributes(plan.kind, body, settings().capture_content))
        record([span], plan, tokens.read(upstream.headers), settings().token_encoding)
        span.end()
        return Response(body if plan.ask else data, status_code=upstream.status_code, headers=headers)

    async def _stream(self, upstream: httpx.Response, plan: Plan, span: Any) -> AsyncIterator[bytes]:
        stream_tokens = StreamTokens(plan, upstream.headers)

        def done() -> None:
            if span.is_recording():
                span.set_attributes(llm_span.stream_attributes(stream_tokens, settings().capture_content))
                record([span], plan, stream_tokens.result(), settings().token_encoding)
                span.end()

        rewriter = SSERewriter(stream_tokens, done)
        try:
            async for out in rewriter.arewrite(upstream.aiter_bytes()):
                yield out
        finally:
            await upstream.aclose()
            done()


def create_gateway_app(upstream: str) -> Starlette:
    """The ASGI app of a gateway in front of ``upstream`` (e.g. ``http://vllm:8000``)."""
    return Gateway(upstream).app
