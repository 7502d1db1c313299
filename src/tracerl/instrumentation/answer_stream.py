"""Streamed answers: tokens gathered over the SSE events of one response, each event
stripped of what tracerl asked for before the agent's SDK reads it.

:class:`SSERewriter` cuts the byte stream into events, incrementally, for sync and async
streams alike; :class:`StreamTokens` reads each event's JSON (an event is small: parsing it
costs little) and keeps choice 0's ids, log-probs, text and tool calls.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Iterator, Mapping

import orjson

from tracerl.instrumentation import messages_api, responses_api
from tracerl.instrumentation.call_tokens import Tokens, choice_logprobs, read_policy_version
from tracerl.instrumentation.request_plan import Plan
from tracerl.schemas import attributes as A


def _strip_choice(plan: Plan, choice: dict) -> None:
    if plan.strip_token_ids:
        choice.pop(A.VLLM_CHOICE_TOKEN_IDS_FIELD, None)
    if plan.strip_logprobs and "logprobs" in choice:
        choice["logprobs"] = None


class StreamTokens:
    """Accumulate tokens over the chunks of one streamed response, stripping each."""

    def __init__(self, plan: Plan, headers: Mapping[str, str] | None = None) -> None:
        self.plan = plan
        self.tokens = Tokens()
        self._headers = headers
        self._ids: list[int] = []
        self._logprobs: list[float] = []
        self._saw_ids = False
        self._saw_logprobs = False
        self.text: list[str] = []  # streamed text of choice 0 (for the gateway's span)
        self.response_id: str | None = None
        self.response_model: str | None = None
        self.finish_reason: str | None = None
        self.tool_calls: dict[int, dict] = {}  # streamed tool calls of choice 0, merged by index
        self.response: dict | None = None  # Responses API: the response its last event carried whole
        self.ended = False  # Responses and Messages APIs: the final event came (they send no [DONE])
        # Messages API: the message its events describe, put back together
        self.message = messages_api.StreamedMessage() if plan.kind == "messages" else None

    def reads(self, payload: bytes) -> bool:
        """Whether an event's JSON is of interest (a Responses stream's text deltas pass unparsed)."""
        return self.plan.kind != "responses" or b'"response"' in payload

    def chunk(self, body: dict) -> None:
        plan = self.plan
        if plan.kind == "responses":
            self._response_event(body)
            return
        if plan.kind == "messages":
            self._message_event(body)
            return
        if self.response_id is None:
            self.response_id, self.response_model = body.get("id"), body.get("model")
        if self.tokens.policy_version is None:
            self.tokens.policy_version = read_policy_version(body.get(A.POLICY_VERSION_FIELD), self._headers)
        prompt = body.get(A.VLLM_PROMPT_TOKEN_IDS_FIELD)
        if prompt is not None:
            self.tokens.prompt_ids = prompt
        if plan.strip_token_ids:
            body.pop(A.VLLM_PROMPT_TOKEN_IDS_FIELD, None)
        for choice in body.get("choices") or ():
            if choice.get("index", 0) == 0:
                ids = choice.get(A.VLLM_CHOICE_TOKEN_IDS_FIELD)
                if ids is not None:
                    self._saw_ids = True
                    self._ids.extend(ids)
                logprobs = choice_logprobs(plan.kind, choice.get("logprobs"))
                if logprobs is not None:
                    self._saw_logprobs = True
                    self._logprobs.extend(logprobs)
                self._content(choice)
            _strip_choice(plan, choice)

    def _content(self, choice: dict) -> None:
        if choice.get("finish_reason"):
            self.finish_reason = choice["finish_reason"]
        if self.plan.kind != "chat":
            if choice.get("text"):
                self.text.append(choice["text"])
            return
        delta = choice.get("delta") or {}
        if delta.get("content"):
            self.text.append(delta["content"])
        for call in delta.get("tool_calls") or ():
            merged = self.tool_calls.setdefault(call.get("index", 0), {"type": "function", "function": {"name": "", "arguments": ""}})
            if call.get("id"):
                merged["id"] = call["id"]
            function = call.get("function") or {}
            merged["function"]["name"] += function.get("name") or ""
            merged["function"]["arguments"] += function.get("arguments") or ""

    def _response_event(self, event: dict) -> None:
        """A Responses API event: the ones that carry the whole response name it, the final one
        its tokens (stripped from it); text deltas are left alone (the final response has it all)."""
        response = event.get("response")
        if event.get("type") not in (*responses_api.RESPONSE_EVENTS, *responses_api.FINAL_EVENTS) or not isinstance(response, dict):
            return
        inputs, outputs = responses_api.strip_response(self.plan.strip_token_ids, response)
        self.response = response
        self.response_id, self.response_model = response.get("id"), response.get("model")
        if event["type"] in responses_api.FINAL_EVENTS:
            self.tokens = responses_api.read_tokens(inputs, outputs, response.get("output"),
                                                    response.get(A.POLICY_VERSION_FIELD), self._headers)
            self.finish_reason = responses_api.finish_reason(response)
            self.ended = True

    def _message_event(self, event: dict) -> None:
        """A Messages API event: its content kept (for the span), tracerl serve's token fields read
        and stripped wherever they come (the ``message_delta`` event; ``message_start``'s message)."""
        self.message.event(event)
        kind = event.get("type")
        if kind == messages_api.MESSAGE_START and isinstance(event.get("message"), dict):
            message = event["message"]
            self.response_id, self.response_model = message.get("id"), message.get("model")
            self._message_tokens(message)
        elif kind == messages_api.MESSAGE_DELTA:
            self._message_tokens(event)
            self.finish_reason = messages_api.finish_reason((event.get("delta") or {}).get("stop_reason")) or self.finish_reason
        elif kind == messages_api.MESSAGE_STOP:
            self.ended = True

    def _message_tokens(self, holder: dict) -> None:
        plan, tokens = self.plan, self.tokens
        pick = holder.pop if plan.strip_token_ids else holder.get
        prompt, completion = pick(A.VLLM_PROMPT_TOKEN_IDS_FIELD, None), pick(A.VLLM_CHOICE_TOKEN_IDS_FIELD, None)
        logprobs = (holder.pop if plan.strip_logprobs else holder.get)(A.MESSAGES_LOGPROBS_FIELD, None)
        if prompt is not None:
            tokens.prompt_ids = prompt
        if completion is not None:
            tokens.completion_ids = completion
        if logprobs is not None:
            tokens.logprobs = choice_logprobs("messages", logprobs)
        if tokens.policy_version is None:
            tokens.policy_version = read_policy_version(holder.get(A.POLICY_VERSION_FIELD), self._headers)

    def result(self) -> Tokens:
        if self.plan.kind in ("responses", "messages"):
            return self.tokens
        if self._saw_ids:
            self.tokens.completion_ids = self._ids
        if self._saw_logprobs:
            self.tokens.logprobs = self._logprobs
        return self.tokens


class SSERewriter:
    """Rewrite an SSE byte stream event by event (incremental, for sync and async)."""

    def __init__(self, stream_tokens: StreamTokens, on_done: Callable[[], None]) -> None:
        self._tokens = stream_tokens
        self._on_done = on_done
        self._buffer = b""

    def feed(self, chunk: bytes) -> bytes:
        """The rewritten bytes of every event completed by ``chunk``."""
        self._buffer += chunk
        out = []
        while True:
            end = _event_end(self._buffer)
            if end < 0:
                break
            event, self._buffer = self._buffer[:end], self._buffer[end:]
            out.append(self._rewrite(event))
        return b"".join(out)

    def flush(self) -> bytes:
        """Whatever is left when the stream ends; finishes the capture."""
        event, self._buffer = self._buffer, b""
        out = self._rewrite(event) if event else b""
        self._on_done()
        return out

    def rewrite(self, chunks: Iterable[bytes]) -> Iterator[bytes]:
        """The rewritten stream of a sync byte stream."""
        for chunk in chunks:
            out = self.feed(chunk)
            if out:
                yield out
        tail = self.flush()
        if tail:
            yield tail

    async def arewrite(self, chunks: AsyncIterable[bytes]) -> AsyncIterator[bytes]:
        """The rewritten stream of an async byte stream."""
        async for chunk in chunks:
            out = self.feed(chunk)
            if out:
                yield out
        tail = self.flush()
        if tail:
            yield tail

    def _rewrite(self, event: bytes) -> bytes:
        lines = event.splitlines(keepends=True)
        changed = False
        for i, line in enumerate(lines):
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                # record before the agent reads [DONE]: its instrumentation ends the span then
                self._on_done()
                continue
            if not payload.startswith(b"{") or not self._tokens.reads(payload):
                continue
            try:
                body = orjson.loads(payload)
            except orjson.JSONDecodeError:
                continue
            self._tokens.chunk(body)
            ending = line[len(line.rstrip(b"\r\n")) :]
            lines[i] = b"data: " + orjson.dumps(body) + ending
            changed = True
        if self._tokens.ended:  # a Responses or Messages stream's last event: record before the agent reads it
            self._on_done()
        return b"".join(lines) if changed else event


def _event_end(buffer: bytes) -> int:
    """Index just past the first complete SSE event (blank-line terminated), or -1."""
    best = -1
    for sep in (b"\n\n", b"\r\n\r\n", b"\r\r"):
        i = buffer.find(sep)
        if i >= 0 and (best < 0 or i + len(sep) < best):
            best = i + len(sep)
    return best
