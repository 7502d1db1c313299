"""The exact tokens of one LLM call, and the readers of the answer fields that carry them.

Whole answers (:mod:`~tracerl.instrumentation.answer_split`) and streamed ones
(:mod:`~tracerl.instrumentation.answer_stream`) both end in a :class:`Tokens`; the
log-probs and the policy version are read the same way from either.
"""

from __future__ import annotations

import array
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from tracerl.schemas import attributes as A


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
# tracerl serve's Messages answers carry chat's shape at their top level (messages_api.py).
_LOGPROBS = {"chat": _ChatLogprobs | None, "messages": _ChatLogprobs | None, "completions": _CompletionLogprobs | None}


def choice_logprobs(kind: str, logprobs: msgspec.Raw | dict | None) -> list[float] | None:
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


def read_policy_version(value: Any, headers: Mapping[str, str] | None) -> int | None:
    """The answer's policy version (its body's field, else the server's header)."""
    if value is None and headers is not None:
        value = headers.get(A.POLICY_VERSION_HEADER)
    try:
        return None if value is None else int(value)
    except (TypeError, ValueError):
        return None
