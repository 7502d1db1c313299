"""Exact token capture for OpenAI-compatible calls, shared by the in-process hook and
the gateway.

The agent must see exactly what it would see without tracerl, so a request is
rewritten to ask vLLM (or tracerl's server) for what training needs and the response is
cut back before the agent reads it:

* :func:`plan_request` adds ``return_token_ids`` and log-probs the agent did not ask for;
* :func:`take_tokens` (whole responses) and :class:`StreamTokens` (SSE chunks) read the
  prompt ids, the sampled ids, their log-probs and the policy version, and remove the
  fields that were added;
* :func:`record` puts them on the LLM call's span; a call without them is counted in
  :data:`STATS` and marked on its span, never dropped in silence.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np
import orjson
from opentelemetry.trace import Span

from tracerl.schemas import attributes as A
from tracerl.schemas.tokens import TokenEncodingError, decode_array, pack_floats, pack_ids

logger = logging.getLogger(__name__)

CHAT_PATH = "/chat/completions"
COMPLETIONS_PATH = "/completions"


def endpoint_kind(path: str) -> str | None:
    """``chat`` or ``completions`` for an OpenAI generation path, else ``None``."""
    if path.endswith(CHAT_PATH):
        return "chat"
    if path.endswith(COMPLETIONS_PATH):
        return "completions"
    return None


@dataclass(frozen=True)
class Plan:
    """What was added to one request, so exactly that is removed from its response."""

    kind: str  # chat | completions
    ask: bool  # token ids and log-probs were asked for
    strip_token_ids: bool
    strip_logprobs: bool
    stream: bool
    reason: str | None = None  # why tokens were not asked for


def plan_request(kind: str, body: Mapping[str, Any], ask: bool, reason: str | None = None) -> tuple[Plan, dict | None]:
    """The plan for a request body and the body to send (``None``: send it unchanged)."""
    stream = bool(body.get("stream"))
    if not ask:
        return Plan(kind, False, False, False, stream, reason), None
    new = dict(body)
    strip_ids = not body.get("return_token_ids")
    new["return_token_ids"] = True
    if kind == "chat":
        strip_logprobs = not body.get("logprobs")
        new["logprobs"] = True
    else:
        strip_logprobs = body.get("logprobs") is None
        if strip_logprobs:
            new["logprobs"] = 1
    return Plan(kind, True, strip_ids, strip_logprobs, stream), new


@dataclass
class Tokens:
    """Exact tokens of one call (choice 0)."""

    prompt_ids: list[int] | np.ndarray | None = None
    completion_ids: list[int] | np.ndarray | None = None
    logprobs: list[float] | None = None
    policy_version: int | None = None


def _choice_logprobs(kind: str, logprobs: Any) -> list[float] | None:
    if not isinstance(logprobs, dict):
        return None
    if kind == "chat":
        content = logprobs.get("content")
        if content is None:
            return None
        return [float(item["logprob"]) for item in content]
    values = logprobs.get("token_logprobs")
    return None if values is None else [float(v) for v in values]


def _policy_version(body: Mapping[str, Any], headers: Mapping[str, str] | None) -> int | None:
    value = body.get(A.POLICY_VERSION_FIELD)
    if value is None and headers is not None:
        value = headers.get(A.POLICY_VERSION_HEADER)
    try:
        return None if value is None else int(value)
    except (TypeError, ValueError):
        return None


def _strip_choice(plan: Plan, choice: dict) -> None:
    if plan.strip_token_ids:
        choice.pop(A.VLLM_CHOICE_TOKEN_IDS_FIELD, None)
    if plan.strip_logprobs and "logprobs" in choice:
        choice["logprobs"] = None


# A JSON object with its members' values left as bytes: skipped over (and validated) in C,
# never turned into Python objects, and written back verbatim.
_MEMBERS = msgspec.json.Decoder(dict[str, msgspec.Raw])
_CHOICES = msgspec.json.Decoder(list[dict[str, msgspec.Raw]])
_ENCODER = msgspec.json.Encoder()
_NULL = msgspec.Raw(b"null")


def stripped_body(plan: Plan, raw: bytes) -> bytes | None:
    """``raw`` without what :func:`plan_request` added: what the agent's SDK is given.

    This runs on the agent's thread, so nothing is parsed that need not be: the prompt's
    ids (most of a vLLM answer) and the log-probs (a few objects per token) are removed
    as unparsed bytes, and the rest is written back as it came. The same JSON is read
    whole, off the calling thread, by :func:`take_tokens`. ``None`` if ``raw`` is not a
    JSON object (the agent then gets it untouched).
    """
    try:
        members = _MEMBERS.decode(raw)
    except msgspec.DecodeError:  # malformed JSON, or valid JSON that is not an object
        return None
    if plan.strip_token_ids:
        members.pop(A.VLLM_PROMPT_TOKEN_IDS_FIELD, None)
    if "choices" in members and (plan.strip_token_ids or plan.strip_logprobs):
        try:
            choices = _CHOICES.decode(members["choices"])
        except msgspec.DecodeError:  # not a list of objects: nothing of ours to remove there
            choices = None
        if choices is not None:
            for choice in choices:
                if plan.strip_token_ids:
                    choice.pop(A.VLLM_CHOICE_TOKEN_IDS_FIELD, None)
                if plan.strip_logprobs and "logprobs" in choice:
                    choice["logprobs"] = _NULL
            members["choices"] = msgspec.Raw(_ENCODER.encode(choices))
    return _ENCODER.encode(members)


def take_tokens(plan: Plan, body: dict, headers: Mapping[str, str] | None = None) -> Tokens:
    """Read the tokens of a whole (non-streamed) response and strip ``body`` in place.

    Malformed log-probs (a server's bug) make a call without log-probs, never an error.
    """
    tokens = Tokens(policy_version=_policy_version(body, headers))
    tokens.prompt_ids = body.get(A.VLLM_PROMPT_TOKEN_IDS_FIELD)
    for choice in body.get("choices") or ():
        if choice.get("index", 0) == 0:
            tokens.completion_ids = choice.get(A.VLLM_CHOICE_TOKEN_IDS_FIELD)
            try:
                tokens.logprobs = _choice_logprobs(plan.kind, choice.get("logprobs"))
            except (KeyError, TypeError, ValueError):
                tokens.logprobs = None
    strip_response(plan, body)
    return tokens


def strip_response(plan: Plan, body: dict) -> None:
    """Remove from a whole response what :func:`plan_request` added to its request."""
    if plan.strip_token_ids:
        body.pop(A.VLLM_PROMPT_TOKEN_IDS_FIELD, None)
    for choice in body.get("choices") or ():
        _strip_choice(plan, choice)


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

    def chunk(self, body: dict) -> None:
        plan = self.plan
        if self.response_id is None:
            self.response_id, self.response_model = body.get("id"), body.get("model")
        if self.tokens.policy_version is None:
            self.tokens.policy_version = _policy_version(body, self._headers)
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
                logprobs = _choice_logprobs(plan.kind, choice.get("logprobs"))
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

    def result(self) -> Tokens:
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
            if not payload.startswith(b"{"):
                continue
            try:
                body = orjson.loads(payload)
            except orjson.JSONDecodeError:
                continue
            self._tokens.chunk(body)
            ending = line[len(line.rstrip(b"\r\n")) :]
            lines[i] = b"data: " + orjson.dumps(body) + ending
            changed = True
        return b"".join(lines) if changed else event


def _event_end(buffer: bytes) -> int:
    """Index just past the first complete SSE event (blank-line terminated), or -1."""
    best = -1
    for sep in (b"\n\n", b"\r\n\r\n", b"\r\r"):
        i = buffer.find(sep)
        if i >= 0 and (best < 0 or i + len(sep) < best):
            best = i + len(sep)
    return best


# ---- recording --------------------------------------------------------------------


class CaptureStats:
    """Process-wide counts of LLM calls with and without exact tokens."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.with_tokens = 0
        self.missing: Counter[str] = Counter()

    def add(self, reason: str | None) -> None:
        with self._lock:
            if reason is None:
                self.with_tokens += 1
            else:
                self.missing[reason] += 1

    def report(self) -> str | None:
        """A warning line when some calls had no token ids, else ``None``."""
        missing = sum(self.missing.values())
        if not missing:
            return None
        reasons = "; ".join(f"{n} x {reason}" for reason, n in self.missing.most_common())
        return (
            f"tracerl: {missing} of {missing + self.with_tokens} LLM calls have no exact token ids "
            f"({reasons}); they cannot be trained on. Point the agent at vLLM or `tracerl serve`, "
            "or set TRACERL_TOKEN_CAPTURE=on."
        )


STATS = CaptureStats()


def missing_reason(plan: Plan, tokens: Tokens | None) -> str | None:
    if not plan.ask:
        return plan.reason or "token ids not requested"
    if tokens is None:
        return "no response body"
    if tokens.prompt_ids is None or tokens.completion_ids is None:
        return "server returned no token ids (not vLLM or tracerl serve?)"
    return None


def token_attributes(plan: Plan, tokens: Tokens | None, encoding: str) -> dict[str, Any]:
    """The span attributes of a call's tokens (or of why it has none); counts the call in
    :data:`STATS`."""
    if tokens is not None:  # a server's malformed ids make a call without token ids, never an error
        tokens.prompt_ids = _int32_ids(tokens.prompt_ids)
        tokens.completion_ids = _int32_ids(tokens.completion_ids)
    reason = missing_reason(plan, tokens)
    STATS.add(reason)
    attributes: dict[str, Any] = {}
    if tokens is not None:
        packed = encoding == "packed"
        for key, ids in ((A.PROMPT_TOKEN_IDS, tokens.prompt_ids), (A.COMPLETION_TOKEN_IDS, tokens.completion_ids)):
            if ids is not None:
                attributes[key] = pack_ids(ids) if packed else ids.tolist()
        if tokens.logprobs is not None:
            lps = tokens.logprobs
            attributes[A.COMPLETION_LOGPROBS] = pack_floats(lps) if packed else lps
        if tokens.policy_version is not None:
            attributes[A.POLICY_VERSION] = tokens.policy_version
    if reason is not None:
        attributes[A.TOKEN_IDS_MISSING] = reason
    return attributes


def _int32_ids(ids: object) -> np.ndarray | None:
    try:
        return decode_array(ids, "i4")
    except TokenEncodingError:
        return None


def record(spans: Iterable[Span], plan: Plan, tokens: Tokens | None, encoding: str) -> None:
    """Count the call and put its token attributes on ``spans`` (one per instrumentation
    layer that made a span for this call)."""
    attributes = token_attributes(plan, tokens, encoding)
    for span in spans:
        if span.is_recording():
            span.set_attributes(attributes)
