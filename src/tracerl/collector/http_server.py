"""OTLP/HTTP front end (starlette on uvicorn): ``POST /v1/traces`` and ``POST /v1/logs``.

Status codes follow the OTLP/HTTP specification: 200 with an optional partial success,
400 (with a ``google.rpc.Status`` saying what is wrong) for data that can never be
accepted, 401 without the bearer token, 413 for bodies over the limit, 415 for an
unknown content type, and 429/503 with ``Retry-After`` when the client should come back
later. The body is read asynchronously with a deadline, so a slow client only holds its
own connection; CPU work runs in a worker thread so the event loop keeps serving others.
"""

from __future__ import annotations

import asyncio
import logging
import zlib

import anyio
import anyio.to_thread
from google.protobuf.message import Message
from google.rpc import code_pb2, status_pb2
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from tracerl.collector import otlp
from tracerl.collector.service import LOGS, TRACES, Collector, Signal
from tracerl.collector.sink import Overloaded
from tracerl.schemas import attributes as A

log = logging.getLogger("tracerl.collector")

PROTOBUF = "application/x-protobuf"
JSON = "application/json"


class HttpError(Exception):
    def __init__(self, status: int, message: str, retry_after_s: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after_s = retry_after_s


def create_app(collector: Collector) -> Starlette:
    # Threads for Collector.export: it converts one request at a time anyway, and each thread beyond
    # the two that keep it busy would only add a malloc arena and a stack (anyio's default is 40)
    converters = anyio.CapacityLimiter(2)

    def endpoint(signal: Signal):
        async def handle(request: Request) -> Response:
            return await _handle(collector, signal, request, converters)

        return handle

    async def health(_: Request) -> Response:
        return PlainTextResponse("ok")

    return Starlette(
        routes=[
            Route("/v1/traces", endpoint(TRACES), methods=["POST"]),
            Route("/v1/logs", endpoint(LOGS), methods=["POST"]),
            Route("/healthz", health, methods=["GET"]),
        ]
    )


async def _handle(collector: Collector, signal: Signal, request: Request, converters: anyio.CapacityLimiter) -> Response:
    content_type = request.headers.get(A.CONTENT_TYPE_HEADER, "").split(";")[0].strip().lower()
    as_json = content_type == JSON
    reserved = 0
    try:
        if not collector.authorized(request.headers.get(A.AUTHORIZATION_HEADER)):
            raise HttpError(401, "missing or wrong bearer token (header 'Authorization: Bearer <token>')")
        if content_type not in (PROTOBUF, JSON):
            raise HttpError(415, f"Content-Type must be {PROTOBUF} or {JSON}, got {content_type or 'none'!r}")
        collector.check_room(signal)  # a full backlog refuses before the body is read
        limit = collector.config.max_body_bytes
        try:
            with anyio.fail_after(collector.config.body_timeout_s):
                body, reserved = await _read_body(request, limit, collector)
        except TimeoutError:
            raise HttpError(408, f"request body not received within {collector.config.body_timeout_s:g}s") from None
        encoding = request.headers.get(A.CONTENT_ENCODING_HEADER, "identity").strip().lower()
        if encoding in _WBITS:
            body = _inflate(body, limit, encoding)
            collector.admission.acquire(len(body))
            reserved += len(body)
        elif encoding not in ("identity", ""):
            raise HttpError(415, f"Content-Encoding {encoding!r} is not supported; use gzip, deflate or none")
        durable, response = await anyio.to_thread.run_sync(collector.export, signal, body, as_json, limiter=converters)
        await asyncio.wrap_future(durable)  # no thread held while the WAL syncs
        if response.HasField("partial_success"):
            log.info("%s: rejected %d items of one request", signal.table.name, _rejected(response))
        return _message(200, response, as_json)
    except HttpError as exc:
        return _status(exc.status, str(exc), as_json, exc.retry_after_s)
    except otlp.BadPayload as exc:
        return _status(400, str(exc), as_json)
    except Overloaded as exc:
        return _status(exc.http_status, str(exc), as_json, exc.retry_after_s)
    except ClientDisconnect:
        return Response(status_code=400)
    except Exception as exc:  # a bug: say so without the data (messages may quote span content)
        log.error("internal error handling a %s request: %s", signal.table.name, type(exc).__name__)
        return _status(500, f"internal error ({type(exc).__name__}); the collector log has no more", as_json)
    finally:
        collector.admission.release(reserved)


async def _read_body(request: Request, limit: int, collector: Collector) -> tuple[bytes, int]:
    """The body, refused early when over ``limit``; its bytes count against admission.

    A body with a Content-Length is admitted by that length before a byte of it is read, so a
    refused request costs nothing (its bytes are discarded as they arrive); a chunked one is
    admitted chunk by chunk.
    """
    declared = request.headers.get(A.CONTENT_LENGTH_HEADER)
    reserved = 0
    if declared is not None:
        if not declared.isdigit():
            raise HttpError(400, f"invalid Content-Length {declared[:20]!r}")
        if int(declared) > limit:
            raise HttpError(413, f"body of {declared} bytes exceeds the limit of {limit} bytes")
        collector.admission.acquire(int(declared))
        reserved = int(declared)
    chunks: list[bytes] = []
    received = 0
    try:
        async for chunk in request.stream():
            if received + len(chunk) > limit:
                raise HttpError(413, f"body exceeds the limit of {limit} bytes")
            if declared is None:
                collector.admission.acquire(len(chunk))
                reserved += len(chunk)
            received += len(chunk)
            chunks.append(chunk)
    except BaseException:
        collector.admission.release(reserved)
        raise
    return b"".join(chunks), reserved


_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


def _inflate(body: bytes, limit: int, encoding: str) -> bytes:
    """Decompress with a ceiling, so a small zip bomb cannot exhaust memory.

    A gzip body may hold several members one after another (RFC 1952; ``cat a.gz b.gz``, and
    what some clients send in chunks): all are read, as ``gzip -d`` reads them. Bytes after the
    last member that are not another member are refused, not silently dropped."""
    data = b""
    rest = body
    while True:
        inflater = zlib.decompressobj(wbits=_WBITS[encoding])
        try:
            data += inflater.decompress(rest, limit + 1 - len(data))
        except zlib.error as exc:
            raise HttpError(400, f"body is not valid {encoding}: {exc}") from exc
        if len(data) > limit or inflater.unconsumed_tail:
            raise HttpError(413, f"decompressed body exceeds the limit of {limit} bytes")
        if not inflater.eof:
            raise HttpError(400, f"{encoding} body is truncated")
        rest = inflater.unused_data
        if not rest:
            return data
        if encoding != "gzip" or not rest.startswith(_GZIP_MAGIC):
            raise HttpError(400, f"{len(rest)} bytes after the end of the {encoding} stream are not another {encoding} member")


_GZIP_MAGIC = b"\x1f\x8b"


def _rejected(response: Message) -> int:
    partial = response.partial_success
    return getattr(partial, "rejected_spans", 0) or getattr(partial, "rejected_log_records", 0)


def _message(status: int, message: Message, as_json: bool, headers: dict | None = None) -> Response:
    if as_json:
        return Response(otlp.message_json(message), status, headers=headers, media_type=JSON)
    return Response(message.SerializeToString(), status, headers=headers, media_type=PROTOBUF)


_CODES = {400: code_pb2.INVALID_ARGUMENT, 401: code_pb2.UNAUTHENTICATED, 408: code_pb2.DEADLINE_EXCEEDED,
          413: code_pb2.INVALID_ARGUMENT, 415: code_pb2.INVALID_ARGUMENT, 429: code_pb2.RESOURCE_EXHAUSTED,
          503: code_pb2.UNAVAILABLE}


def _status(status: int, message: str, as_json: bool, retry_after_s: int | None = None) -> Response:
    headers = {A.RETRY_AFTER_HEADER: str(retry_after_s)} if retry_after_s is not None else None
    body = status_pb2.Status(code=_CODES.get(status, code_pb2.UNKNOWN), message=message)
    return _message(status, body, as_json, headers)
