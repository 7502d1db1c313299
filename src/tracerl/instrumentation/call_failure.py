"""What a failed LLM call records on its span: ``error.type`` and the server's message.

A call the server refused (a 400 for a prompt that does not fit, a 404 for an unknown
model) or that never got an answer (connection refused, timeout) is not a call "without
token ids": its span says it failed, why (OTel's ``error.type``: the HTTP status code, or
the exception's class), and the server's own message as the span's status description,
so ``doctor`` and ``build-dataset`` can report it as failed and quote the server. The
answer's body is kept as bytes on the agent's thread and read on the span finisher.
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson

MAX_MESSAGE_CHARS = 2000  # a server's HTML error page is not a message


@dataclass(frozen=True, slots=True)
class CallFailure:
    """Why one LLM call failed: ``error_type`` as OTel names it, and the server's answer."""

    error_type: str
    body: bytes = b""
    exception_message: str | None = None

    @classmethod
    def from_status(cls, status_code: int, body: bytes) -> CallFailure:
        """An HTTP error answer: ``error.type`` is the status code (OTel HTTP conventions)."""
        return cls(str(status_code), body)

    @classmethod
    def from_exception(cls, error: BaseException) -> CallFailure:
        """No answer at all: ``error.type`` is the exception's fully qualified class name."""
        name = exception_type(error)
        return cls(name, exception_message=str(error) or name)

    def message(self) -> str:
        """The server's message (OpenAI's ``error.message``, FastAPI's ``detail``), else the
        body as text, else the exception's message."""
        if self.exception_message is not None:
            return self.exception_message[:MAX_MESSAGE_CHARS]
        try:
            answer = orjson.loads(self.body)
        except orjson.JSONDecodeError:
            answer = None
        found = _message_of(answer)
        text = found if found is not None else self.body.decode("utf-8", "replace").strip()
        return (text or f"HTTP {self.error_type}")[:MAX_MESSAGE_CHARS]


def exception_type(error: BaseException) -> str:
    """OTel's ``error.type`` of an exception: its fully qualified class name."""
    kind = type(error)
    return kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


def _message_of(answer: object) -> str | None:
    if not isinstance(answer, dict):
        return None
    error = answer.get("error")
    if isinstance(error, dict) and error.get("message"):
        return str(error["message"])
    for key in ("message", "detail", "error"):
        value = answer.get(key)
        if isinstance(value, str) and value:
            return value
        if value:  # FastAPI's validation details are a list
            return orjson.dumps(value).decode()
    return None
