"""A deterministic OpenAI-compatible server that answers like vLLM, on loopback.

For tests and benchmarks of capture that need a real HTTP endpoint but no model: it
speaks the OpenAI chat and completions APIs (streaming and tool calls included) and,
exactly like vLLM, returns ``prompt_token_ids``/``token_ids`` only when asked with
``return_token_ids`` and log-probs only when asked with ``logprobs``. The Responses API
and Anthropic's Messages API are answered whole (no streams), with the token fields
``tracerl serve`` gives them (``enable_response_messages``; ``return_token_ids`` and
``logprobs``), so capture of every API can be timed against the same server. Both APIs' token
counting (``/v1/messages/count_tokens``, ``/v1/responses/input_tokens``) is answered too: calls
that generate nothing, which capture must leave alone. It remembers what
it returned (:attr:`ScriptedServer.calls`) so a test can compare captured tokens with
the truth. Token ids are the UTF-8 bytes of the text (+ an EOS id), log-probs a fixed
function of the position.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tracerl.schemas import attributes as A
from tracerl.core.uvicorn_thread import serve_in_thread

EOS_ID = 256
POLICY_VERSION = 7
RESPONSE_MESSAGES_FIELD = "enable_response_messages"  # vLLM's: a Responses answer with the prompt's and completion's ids
# what each API's prompt is made of (its ids are the UTF-8 bytes of this, as JSON)
PROMPT_FIELDS: dict[str, Callable[[dict], Any]] = {
    "chat": lambda body: body.get("messages"),
    "completions": lambda body: body.get("prompt"),
    "responses": lambda body: [body.get("instructions"), body.get("input")],
    "messages": lambda body: [body.get("system"), body.get("messages")],
}


@dataclass(frozen=True)
class Reply:
    """What the scripted model says: text, or one tool call."""

    text: str = ""
    tool_name: str | None = None
    tool_arguments: dict[str, Any] | str = field(default_factory=dict)  # a str is sent as written (malformed JSON, say)


Responder = Callable[[dict], Reply]


def default_responder(body: dict) -> Reply:
    """Call each offered tool once (in order), then answer; completions echo a length.

    Enough to drive tool loops, handoffs and multi-agent chats of real frameworks, in any of
    the APIs served (chat ``messages``, Responses ``input``, Anthropic ``messages``).
    """
    conversation = body.get("messages", body.get("input"))
    if conversation is None:
        return Reply(text=f"ok:{len(str(body.get('prompt', '')))}")
    called = called_tools(conversation)
    for tool in body.get("tools") or ():
        fn = tool.get("function", tool)
        if fn["name"] not in called:
            schema = fn.get("parameters", fn.get("input_schema", {}))
            return Reply(tool_name=fn["name"], tool_arguments={k: "x" for k in schema.get("properties", {})})
    turns = len(conversation) if isinstance(conversation, list) else 1  # Responses input may be one text
    return Reply(text=f"done after {turns} messages")


def called_tools(conversation: list | str) -> set[str]:
    """The names of the tools the conversation already called: chat's ``tool_calls``, Responses'
    ``function_call`` items, Anthropic's ``tool_use`` blocks."""
    names: set[str] = set()
    for item in conversation if isinstance(conversation, list) else ():
        if item.get("type") == "function_call":
            names.add(item.get("name"))
        if item.get("role") != "assistant":
            continue
        names |= {call.get("function", {}).get("name") for call in item.get("tool_calls") or ()}
        content = item.get("content")
        if isinstance(content, list):
            names |= {block.get("name") for block in content if isinstance(block, dict) and block.get("type") == "tool_use"}
    return names


def text_ids(text: str) -> list[int]:
    return list(text.encode())


def logprob_at(i: int) -> float:
    return -0.05 - 0.1 * (i % 5)


@dataclass
class Call:
    """One answered request and the exact tokens the server returned for it."""

    path: str
    request: dict
    prompt_token_ids: list[int]
    token_ids: list[int]
    logprobs: list[float]


class ScriptedServer:
    def __init__(self, responder: Responder = default_responder, latency_s: float = 0.0) -> None:
        self.responder = responder
        self.latency_s = latency_s
        self.calls: list[Call] = []
        self.base_url = ""
        self.app = Starlette(
            routes=[
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
                Route("/v1/completions", self._completions, methods=["POST"]),
                Route("/v1/responses", self._responses, methods=["POST"]),
                Route("/v1/messages", self._messages, methods=["POST"]),
                Route("/v1/messages/count_tokens", self._count_tokens, methods=["POST"]),
                Route("/v1/responses/input_tokens", self._count_tokens, methods=["POST"]),
                Route("/v1/models", self._models, methods=["GET"]),
            ]
        )

    # ---- endpoints ----------------------------------------------------------------

    async def _models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": "scripted", "object": "model"}]})

    async def _chat(self, request: Request) -> Response:
        return await self._answer(request, "chat")

    async def _completions(self, request: Request) -> Response:
        return await self._answer(request, "completions")

    async def _responses(self, request: Request) -> Response:
        return await self._answer(request, "responses")

    async def _messages(self, request: Request) -> Response:
        return await self._answer(request, "messages")

    async def _count_tokens(self, request: Request) -> Response:
        """The prompt's length in tokens, as Anthropic's count_tokens and OpenAI's input_tokens answer."""
        body = json.loads(await request.body())
        api = "messages" if request.url.path.endswith("/count_tokens") else "responses"
        prompt_ids = text_ids(json.dumps(PROMPT_FIELDS[api](body)))[:512]
        self.calls.append(Call(request.url.path, body, prompt_ids, [], []))
        counted = {"input_tokens": len(prompt_ids)}
        return JSONResponse(counted if api == "messages" else {"object": "response.input_tokens", **counted})

    async def _answer(self, request: Request, api: str) -> Response:
        started = time.perf_counter()
        try:
            body = json.loads(await request.body())
        except json.JSONDecodeError as exc:
            return JSONResponse({"object": "error", "message": f"invalid JSON: {exc}", "code": 400}, status_code=400)
        if body.get("model") == "missing-model":
            msg = f"The model `{body['model']}` does not exist."
            return JSONResponse({"object": "error", "message": msg, "type": "NotFoundError", "code": 404}, 404)
        if body.get("stream") and api in ("responses", "messages"):
            msg = f"the scripted server answers /v1/{api} whole only: send it without stream"
            return JSONResponse({"object": "error", "message": msg, "code": 400}, status_code=400)
        if self.latency_s:
            slept = time.perf_counter()
            await asyncio.sleep(self.latency_s)
            started += time.perf_counter() - slept  # Server-Timing counts the server's work, not the scripted wait
        reply = self.responder(body)
        chat = api == "chat"
        prompt_text = json.dumps(PROMPT_FIELDS[api](body))
        prompt_ids = text_ids(prompt_text)[:512]
        if reply.tool_name is not None:
            out_text = json.dumps({"name": reply.tool_name, "arguments": reply.tool_arguments})
            out_text = f"<tool_call>{out_text}</tool_call>"
        else:
            out_text = reply.text
        ids = text_ids(out_text) + [EOS_ID]
        lps = [logprob_at(i) for i in range(len(ids))]
        self.calls.append(Call(request.url.path, body, prompt_ids, ids, lps))
        call_id = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:16]}"
        headers = {A.POLICY_VERSION_HEADER: str(POLICY_VERSION)}
        if body.get("stream"):
            chunks = self._chunks(body, chat, call_id, reply, out_text, prompt_ids, ids, lps)
            return StreamingResponse(chunks, media_type="text/event-stream", headers=headers)
        if api == "responses":
            whole = self._response(body, reply, prompt_text, out_text, prompt_ids, ids, lps)
        elif api == "messages":
            whole = self._message(body, reply, prompt_ids, ids, lps)
        else:
            whole = self._whole(body, chat, call_id, reply, out_text, prompt_ids, ids, lps)
        response = JSONResponse(whole, headers=headers)
        # W3C Server-Timing: what answering took here (parsing and encoding included), so a
        # benchmark can tell the server's cost of returning tokens from the client's cost of capture
        response.headers["server-timing"] = f"app;dur={(time.perf_counter() - started) * 1e3:.3f}"
        return response

    # ---- response bodies ----------------------------------------------------------

    @staticmethod
    def _tool_calls(reply: Reply) -> list[dict]:
        args = reply.tool_arguments if isinstance(reply.tool_arguments, str) else json.dumps(reply.tool_arguments)
        call = {"id": f"call_{uuid.uuid4().hex[:12]}", "type": "function", "function": {"name": reply.tool_name, "arguments": args}}
        return [call]

    @staticmethod
    def _chat_logprobs(ids: list[int], lps: list[float]) -> dict:
        content = []
        for tid, lp in zip(ids, lps):
            token = "" if tid == EOS_ID else bytes([tid]).decode("latin-1")
            content.append({"token": token, "logprob": lp, "bytes": [] if tid == EOS_ID else [tid], "top_logprobs": []})
        return {"content": content}

    def _whole(self, body, chat, call_id, reply, out_text, prompt_ids, ids, lps) -> dict:
        want_ids = bool(body.get(A.VLLM_RETURN_TOKEN_IDS_FIELD))
        finish = "tool_calls" if reply.tool_name and chat else "stop"
        if chat:
            message: dict[str, Any] = {"role": "assistant", "content": None if reply.tool_name else out_text}
            if reply.tool_name:
                message["tool_calls"] = self._tool_calls(reply)
            choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
            if body.get("logprobs"):
                choice["logprobs"] = self._chat_logprobs(ids, lps)
        else:
            choice = {"index": 0, "text": out_text, "finish_reason": finish, "logprobs": None}
            if body.get("logprobs") is not None:
                tokens = [bytes([t]).decode("latin-1") if t != EOS_ID else "" for t in ids]
                choice["logprobs"] = {"tokens": tokens, "token_logprobs": lps, "top_logprobs": None, "text_offset": []}
        if want_ids:
            choice[A.VLLM_CHOICE_TOKEN_IDS_FIELD] = ids
        out = {
            "id": call_id,
            "object": "chat.completion" if chat else "text_completion",
            "created": int(time.time()),
            "model": body.get("model", "scripted"),
            "choices": [choice],
            "usage": {"prompt_tokens": len(prompt_ids), "completion_tokens": len(ids), "total_tokens": len(prompt_ids) + len(ids)},
            A.POLICY_VERSION_FIELD: POLICY_VERSION,
        }
        if want_ids:
            out[A.VLLM_PROMPT_TOKEN_IDS_FIELD] = prompt_ids
        return out

    def _response(self, body, reply, prompt_text, out_text, prompt_ids, ids, lps) -> dict:
        """A Responses API response; with ``enable_response_messages`` the ids as tracerl serve gives them."""
        if reply.tool_name is not None:
            (call,) = self._tool_calls(reply)
            item = {"type": "function_call", "id": f"fc_{uuid.uuid4().hex[:12]}", "call_id": call["id"],
                    "name": reply.tool_name, "arguments": call["function"]["arguments"], "status": "completed"}
        else:
            item = {"type": "message", "id": f"msg_{uuid.uuid4().hex[:12]}", "role": "assistant", "status": "completed",
                    "content": [{"type": "output_text", "text": out_text, "annotations": []}]}
        out = {
            "id": f"resp_{uuid.uuid4().hex[:16]}", "object": "response", "created_at": int(time.time()), "status": "completed",
            "error": None, "incomplete_details": None, "instructions": body.get("instructions"),
            "model": body.get("model", "scripted"), "output": [item], "parallel_tool_calls": True,
            "tool_choice": body.get("tool_choice", "auto"), "tools": body.get("tools") or [],
            "usage": {"input_tokens": len(prompt_ids), "output_tokens": len(ids), "total_tokens": len(prompt_ids) + len(ids)},
            A.POLICY_VERSION_FIELD: POLICY_VERSION,
        }
        if body.get(RESPONSE_MESSAGES_FIELD):
            out["input_messages"] = [{"type": "raw_message_tokens", "message": prompt_text, "tokens": prompt_ids}]
            out["output_messages"] = [{"type": "raw_message_tokens", "message": out_text, "tokens": ids, "logprobs": lps}]
        return out

    def _message(self, body, reply, prompt_ids, ids, lps) -> dict:
        """An Anthropic Messages message; the token fields as tracerl serve gives them, when asked."""
        if reply.tool_name is not None:
            block = {"type": "tool_use", "id": f"toolu_{uuid.uuid4().hex[:12]}", "name": reply.tool_name, "input": reply.tool_arguments}
        else:
            block = {"type": "text", "text": reply.text}
        out = {
            "id": f"msg_{uuid.uuid4().hex[:16]}", "type": "message", "role": "assistant", "model": body.get("model", "scripted"),
            "content": [block], "stop_reason": "tool_use" if reply.tool_name else "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": len(prompt_ids), "output_tokens": len(ids)}, A.POLICY_VERSION_FIELD: POLICY_VERSION,
        }
        if body.get(A.VLLM_RETURN_TOKEN_IDS_FIELD):
            out[A.VLLM_PROMPT_TOKEN_IDS_FIELD], out[A.VLLM_CHOICE_TOKEN_IDS_FIELD] = prompt_ids, ids
        if body.get("logprobs"):
            out["logprobs"] = self._chat_logprobs(ids, lps)
        return out

    async def _chunks(self, body, chat, call_id, reply, out_text, prompt_ids, ids, lps):
        want_ids = bool(body.get(A.VLLM_RETURN_TOKEN_IDS_FIELD))
        base = {"id": call_id, "object": "chat.completion.chunk" if chat else "text_completion",
                "created": int(time.time()), "model": body.get("model", "scripted"), A.POLICY_VERSION_FIELD: POLICY_VERSION}

        def event(choice: dict, **extra: Any) -> bytes:
            return f"data: {json.dumps({**base, **extra, 'choices': [choice]})}\n\n".encode()

        first: dict[str, Any] = {}
        if want_ids:
            first[A.VLLM_PROMPT_TOKEN_IDS_FIELD] = prompt_ids
        if chat:
            yield event({"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}, **first)
            first = {}
        # split the output in pieces of up to 4 tokens, the last piece carrying EOS
        pieces = [(i, min(i + 4, len(ids))) for i in range(0, len(ids), 4)]
        for start, end in pieces:
            piece_ids = ids[start:end]
            text = bytes(t for t in piece_ids if t != EOS_ID).decode("utf-8", "replace")
            if chat:
                if reply.tool_name:
                    delta: dict[str, Any] = {"content": None}
                    if start == 0:
                        delta["tool_calls"] = [{"index": 0, **self._tool_calls(reply)[0]}]
                else:
                    delta = {"content": text}
                choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": None, "logprobs": None}
                if body.get("logprobs"):
                    choice["logprobs"] = self._chat_logprobs(piece_ids, lps[start:end])
            else:
                choice = {"index": 0, "text": text, "finish_reason": None, "logprobs": None}
                if body.get("logprobs") is not None:
                    choice["logprobs"] = {"tokens": [], "token_logprobs": lps[start:end], "top_logprobs": None, "text_offset": []}
            if want_ids:
                choice[A.VLLM_CHOICE_TOKEN_IDS_FIELD] = piece_ids
            if end == len(ids):
                choice["finish_reason"] = "tool_calls" if reply.tool_name and chat else "stop"
            yield event(choice, **first)
            first = {}
        if (body.get("stream_options") or {}).get("include_usage"):
            usage = {"prompt_tokens": len(prompt_ids), "completion_tokens": len(ids), "total_tokens": len(prompt_ids) + len(ids)}
            yield f"data: {json.dumps({**base, 'choices': [], 'usage': usage})}\n\n".encode()
        yield b"data: [DONE]\n\n"


@contextmanager
def running_scripted_server(responder: Responder = default_responder, latency_s: float = 0.0) -> Iterator[ScriptedServer]:
    server = ScriptedServer(responder, latency_s)
    with serve_in_thread(server.app, name="scripted-server") as url:
        server.base_url = f"{url}/v1"
        yield server
