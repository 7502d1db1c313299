"""Exact tokens for LLM requests made with httpx directly, not through the OpenAI SDK.

LiteLLM reaches a ``hosted_vllm/`` model (and other OpenAI-compatible providers) with
its own httpx client, hand-written agents post to ``/chat/completions`` themselves, and
the Anthropic SDK sends its Messages calls (``POST /v1/messages``,
:mod:`~tracerl.instrumentation.messages_api`) with httpx2: without this their calls are
only HTTP client spans. ``Client.send`` and
``AsyncClient.send`` of httpx (and httpx2, what the OpenAI SDK 3.x uses) are wrapped:
a POST to an LLM endpoint whose body is JSON gets the same plan, the same answer
stripping and the same span as an OpenAI SDK call (:func:`~tracerl.instrumentation.openai_hook.send_captured`).
Requests the OpenAI SDK sends are left to its own hook (they are sent inside it), and
every other request costs one method and path test. Unlike the SDK's dict, the body here
is bytes: it is parsed and, when fields are added, encoded again (only for these calls).
"""

from __future__ import annotations

from typing import Any

import orjson
from opentelemetry.instrumentation.utils import is_instrumentation_enabled
from wrapt import wrap_function_wrapper

from tracerl.instrumentation.openai_hook import PLAN_EXTENSION, asend_captured, plan_call, send_captured
from tracerl.instrumentation.processor import llm_request_captured
from tracerl.instrumentation.request_plan import endpoint_kind, is_llm_request

HTTPX_MODULES = ("httpx", "httpx2")  # wrap() runs when the agent imports one (frameworks.install)


def wrap(module: Any) -> None:
    """Wrap the clients of an httpx-like module."""
    if hasattr(module, "Client") and hasattr(module, "AsyncClient"):
        wrap_function_wrapper(module, "Client.send", _send)
        wrap_function_wrapper(module, "AsyncClient.send", _send_async)


def _prepare(request: Any) -> Any | None:
    """``request`` with token fields added and its plan attached, or None to leave it alone."""
    if request.method != "POST" or llm_request_captured.get() or not is_instrumentation_enabled():
        return None
    kind = endpoint_kind(request.url.path)
    if kind is None or request.headers.get("content-encoding"):
        return None
    try:
        body = orjson.loads(request.content)  # a streamed body is not read: RequestNotRead
    except Exception:
        return None
    if not isinstance(body, dict) or not is_llm_request(kind, body):
        return None
    plan, new_body = plan_call(kind, body, request.url.host)
    if new_body is not None:
        headers = request.headers.copy()
        del headers["content-length"]
        request = type(request)(
            request.method, request.url, headers=headers, content=orjson.dumps(new_body), extensions=dict(request.extensions)
        )
    request.extensions[PLAN_EXTENSION] = (plan, body)
    return request


def _send(wrapped, instance, args, kwargs):
    request = _prepare(args[0] if args else kwargs["request"])
    if request is None:
        return wrapped(*args, **kwargs)
    options = {k: v for k, v in kwargs.items() if k != "request"}
    stream = options.pop("stream", False)
    # unread, so that a streamed answer passes through tracerl's SSE rewriter
    response = send_captured(request, lambda: wrapped(request, *args[1:], stream=True, **options))
    if not stream:
        response.read()
    return response


async def _send_async(wrapped, instance, args, kwargs):
    request = _prepare(args[0] if args else kwargs["request"])
    if request is None:
        return await wrapped(*args, **kwargs)
    options = {k: v for k, v in kwargs.items() if k != "request"}
    stream = options.pop("stream", False)
    response = await asend_captured(request, lambda: wrapped(request, *args[1:], stream=True, **options))
    if not stream:
        await response.aread()
    return response
