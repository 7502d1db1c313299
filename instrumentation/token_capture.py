"""Exact token capture for OpenAI-compatible calls, shared by the in-process hook and
the gateway.

The agent must see exactly what it would see without tracerl, so a request is
rewritten to ask vLLM (or tracerl's server) for what training needs and the response is
cut back before the agent reads it:

* :func:`plan_request` adds ``return_token_ids`` and log-probs the agent did not ask for;
* :func:`split_answer` (whole responses) and :class:`StreamTokens` (SSE chunks) read the
  prompt ids, the sampled ids, their log-probs and the policy version, and remove the
  fields that were added;
* :func:`record` puts them on the LLM call's span; a call without them is counted in
  :data:`STATS` and marked on its span, never dropped in silence.
"""

from __future__ import annotations

import array
import logging
import threading
from collections import Counter
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec
import orjson
from opentelemetry.trace import Span

from tracerl.schemas import attributes as A
from tracerl.schemas.tokens import pack_floats, pack_ids

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

    prompt_ids: list[int] | array.array | None = None
    completion_ids: list[int] | array.array | None = None
    logprobs: list[float] | None = None
    policy_version: int | None = None


class _TokenLogprob(msgspec.Struct, gc=False):
    logprob: float


class _ChatLogprobs(msgspec.Struct, gc=False):
    """A chat choice's ``logprobs``: ``{"content": [{"token", "logprob", "bytes", ...}]}``."""

    content: list[_TokenLogprob] | None = None

    def floats(self) -> list[float] | None:
        return None if self.content is None else [item.logprob for item in self.content]


class _CompletionLogprobs(msgspec.Struct, gc=False):
    """A completion choice's ``logprobs``: ``{"tokens", "token_logprobs", ...}``."""

    token_logprobs: list[float] | None = None

    def floats(self) -> list[float] | None:
        return self.token_logprobs


# Only the floats are read: the other fields of each token are skipped in C, and the
# structs are not tracked by the garbage collector (a vLLM answer has one per token).
_LOGPROBS = {"chat": _ChatLogprobs | None, "completions": _CompletionLogprobs | None}


def _choice_logprobs(kind: str, logprobs: msgspec.Raw | dict | None) -> list[float] | None:
    """A choice's log-probs as floats, from its JSON (``Raw``) or parsed; ``None`` when
    absent or malformed (a server's bug makes a call without log-probs, never an error)."""
    if logprobs is None:
        return None
    try:
        if isinstance(logprobs, msgspec.Raw):
            read = msgspec.json.decode(memoryview(logprobs), type=_LOGPROBS[kind])
        else:
            read = msgspec.convert(logprobs, _LOGPROBS[kind])
    except msgspec.MsgspecError:
        return None
    return None if read is None else read.floats()


def _policy_version(value: Any, headers: Mapping[str, str] | None) -> int | None:
    """The answer's policy version (its body's field, else the server's header)."""
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


@dataclass(frozen=True)
class RawTokens:
    """The token members of a whole answer as the server wrote them (choice 0's), unparsed
    until :meth:`read`: bytes cost the calling thread nothing and the garbage collector
    nothing while they wait for the span finisher."""

    kind: str
    prompt_ids: msgspec.Raw | None = None
    completion_ids: msgspec.Raw | None = None
    logprobs: msgspec.Raw | None = None
    policy_version: msgspec.Raw | None = None

    def read(self, headers: Mapping[str, str] | None = None) -> Tokens:
        return Tokens(
            prompt_ids=_parse(self.prompt_ids),
            completion_ids=_parse(self.completion_ids),
            logprobs=_choice_logprobs(self.kind, self.logprobs),
            policy_version=_policy_version(_parse(self.policy_version), headers),
        )


def _parse(member: msgspec.Raw | None) -> Any:
    if member is None:
        return None
    try:
        return orjson.loads(memoryview(member))
    except orjson.JSONDecodeError:  # what msgspec skips over and orjson refuses (ints beyond 64 bits)
        return None


def split_answer(plan: Plan, raw: bytes) -> tuple[bytes, RawTokens] | None:
    """A whole answer split into what the agent's SDK is given (``raw`` without what
    :func:`plan_request` added) and its tokens, both without parsing their values.

    This runs on the agent's thread: the prompt's ids (most of a vLLM answer) and the
    log-probs (a few objects per token) are only skipped over, and the rest is written
    back as it came. ``None`` if ``raw`` is not a JSON object (the agent then gets it as
    it came).
    """
    try:
        members = _MEMBERS.decode(raw)
    except msgspec.DecodeError:  # malformed JSON, or valid JSON that is not an object
        return None
    pick = members.pop if plan.strip_token_ids else members.get
    prompt_ids = pick(A.VLLM_PROMPT_TOKEN_IDS_FIELD, None)
    completion_ids = logprobs = None
    if "choices" in members:
        try:
            choices = _CHOICES.decode(members["choices"])
        except msgspec.DecodeError:  # not a list of objects: nothing of ours there
            choices = ()
        for choice in choices:
            ids = (choice.pop if plan.strip_token_ids else choice.get)(A.VLLM_CHOICE_TOKEN_IDS_FIELD, None)
            index = choice.get("index")
            if index is None or bytes(index) == b"0":
                completion_ids, logprobs = ids, choice.get("logprobs")
            if plan.strip_logprobs and "logprobs" in choice:
                choice["logprobs"] = _NULL
        if choices and (plan.strip_token_ids or plan.strip_logprobs):
            members["choices"] = msgspec.Raw(_ENCODER.encode(choices))
    tokens = RawTokens(plan.kind, prompt_ids, completion_ids, logprobs, members.get(A.POLICY_VERSION_FIELD))
    return _ENCODER.encode(members), tokens


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
            self.tokens.policy_version = _policy_version(body.get(A.POLICY_VERSION_FIELD), self._headers)
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


def _int32_ids(ids: object) -> array.array | None:
    """A server's token ids, checked: ``None`` unless a list of int32 (a float, a string or
    an id beyond int32 makes the call one without token ids)."""
    if not isinstance(ids, (list, array.array)):
        return None
    try:
        return array.array("i", ids)
    except (TypeError, OverflowError):
        return None


def record(spans: Iterable[Span], plan: Plan, tokens: Tokens | None, encoding: str) -> None:
    """Count the call and put its token attributes on ``spans`` (one per instrumentation
    layer that made a span for this call)."""
    attributes = token_attributes(plan, tokens, encoding)
    for span in spans:
        if span.is_recording():
            span.set_attributes(attributes)
