"""An ASGI middleware for ``vllm serve`` that stamps each completion with the policy version.

vLLM numbers its weights (``POST /update_weight_version``, ``GET /weight_info``) but does
not say in a chat, completions, Responses or Messages answer which weights produced it, so the capture could
not put ``tracerl.policy.version`` on the span. Loaded into vLLM's API server
(``vllm serve ... --middleware tracerl.trainer.serving.vllm_policy_version.PolicyVersionHeader``,
with tracerl importable there: ``pip install --no-deps tracerl``), it adds tracerl's
policy-version header, which the capture already reads from tracerl's own server.

The version is asked of the engine when the answer starts, i.e. after generation for a
plain answer and at the first chunk of a stream. Publishing pauses vLLM with
``mode=wait`` (in-flight requests finish on the old weights, new ones wait) and records
the new version before it resumes, so the version read then is the one that generated
the tokens. A version that is not an integer (vLLM's ``"default"`` before the first
``update_weight_version``) adds no header: the span then has no policy version rather
than a wrong one.

**One vLLM, several policies.** When vLLM serves several LoRA adapters, each a policy with
versions of its own, the publisher (:class:`tracerl.trainer.publish.VllmLora`) records the
weight version as a JSON object, adapter name -> version (``{"writer": 3, "checker": 1}``),
and the header carries the version of the adapter the request named (its ``model``). A
request for a model the object does not name (the base model) gets no header.

It imports nothing but tracerl's attribute names, so it runs in vLLM's own environment.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from tracerl.schemas import attributes as A

Message = MutableMapping[str, Any]
Send = Callable[[Message], Awaitable[None]]
_HEADER = A.POLICY_VERSION_HEADER.encode("latin-1")


class PolicyVersionHeader:
    """Adds ``x-tracerl-policy-version`` to the answers of ``/v1/chat/completions``, ``/v1/completions``,
    ``/v1/responses`` and ``/v1/messages`` (Anthropic's Messages API)."""

    def __init__(self, app: Callable[..., Awaitable[None]]) -> None:
        self.app = app

    async def __call__(self, scope: MutableMapping[str, Any], receive: Callable, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].endswith(("/completions", "/responses", "/messages")):
            await self.app(scope, receive, send)
            return

        body = bytearray()  # the request, kept to learn which model (adapter) it asked for

        async def receive_and_keep() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                body.extend(message.get("body", b""))
            return message

        async def send_with_version(message: Message) -> None:
            if message["type"] == "http.response.start":
                version = served_version(str(await scope["app"].state.engine_client.get_weight_version()), bytes(body))
                if version is not None:
                    message["headers"] = [*message.get("headers", ()), (_HEADER, str(version).encode("ascii"))]
            await send(message)

        await self.app(scope, receive_and_keep, send_with_version)


def served_version(weight_version: str, request_body: bytes) -> int | None:
    """The policy version that answers a request: vLLM's weight version when it is one number; the
    requested adapter's entry when it is an adapter -> version object; None otherwise."""
    if weight_version.isdigit():
        return int(weight_version)
    if not weight_version.startswith("{"):
        return None
    try:
        versions, model = json.loads(weight_version), json.loads(request_body or b"{}").get("model")
    except (ValueError, AttributeError):
        return None
    version = versions.get(model) if isinstance(versions, dict) else None
    return version if isinstance(version, int) else None
