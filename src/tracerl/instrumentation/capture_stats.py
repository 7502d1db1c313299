"""Process-wide counts of what was captured, for the summary ``tracerl run`` prints at exit.

A call without token ids cannot be trained on, a failed call is no transition, and an LLM
request no hook recognised leaves only an HTTP client span: none of them is dropped in
silence. Each is marked on its span (``tracerl.llm.token_ids_missing``, ``error.type``,
``tracerl.http.llm_request``), counted here, and named at exit with what to do about it.
"""

from __future__ import annotations

import threading
from collections import Counter

FIX_UNRECOGNISED = (
    "send it with the OpenAI Python SDK, LiteLLM or httpx (a JSON body, not a stream), which tracerl "
    "captures, or point the client at `tracerl gateway`"
)


class CaptureStats:
    """Process-wide counts of spans and LLM calls, by what became of them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.with_tokens = 0
        self.missing: Counter[str] = Counter()
        self.failed: Counter[tuple[str, str]] = Counter()  # (error.type, the server's message)
        self.spans = 0
        self.http_llm_spans: Counter[str] = Counter()  # by tracerl.http.llm_request value
        self.unrecognised: Counter[str] = Counter()  # "POST url" of LLM requests no hook saw
        self.notes: list[str] = []  # framework hooks' warnings (capture they could not do)

    def add(self, reason: str | None) -> None:
        with self._lock:
            if reason is None:
                self.with_tokens += 1
            else:
                self.missing[reason] += 1

    def add_failure(self, error_type: str, message: str | None) -> None:
        with self._lock:
            self.failed[error_type, (message or "").splitlines()[0][:200] if message else ""] += 1

    def add_span(self) -> None:
        with self._lock:
            self.spans += 1

    def add_http_llm_span(self, kind: str, request: str | None = None) -> None:
        with self._lock:
            self.http_llm_spans[kind] += 1
            if request is not None:
                self.unrecognised[request] += 1

    def add_note(self, note: str) -> None:
        with self._lock:
            if note not in self.notes:
                self.notes.append(note)

    @property
    def calls(self) -> int:
        return self.with_tokens + sum(self.missing.values()) + sum(self.failed.values())

    def report(self) -> str | None:
        """Warning lines for what cannot be trained on, else ``None``."""
        lines = []
        missing = sum(self.missing.values())
        if missing:
            reasons = "; ".join(f"{n} x {reason}" for reason, n in self.missing.most_common())
            lines.append(
                f"tracerl: {missing} of {missing + self.with_tokens} LLM calls have no exact token ids "
                f"({reasons}); they cannot be trained on. Point the agent at vLLM or `tracerl serve`, "
                "or set TRACERL_TOKEN_CAPTURE=on."
            )
        failed = sum(self.failed.values())
        if failed:
            errors = "; ".join(f"{n} x {kind}: {message}" for (kind, message), n in self.failed.most_common(5))
            lines.append(f"tracerl: {failed} LLM calls failed ({errors}).")
        unrecognised = sum(self.unrecognised.values())
        if unrecognised:
            requests = "; ".join(f"{n} x {request}" for request, n in self.unrecognised.most_common(5))
            lines.append(
                f"tracerl: {unrecognised} LLM requests were seen only as HTTP client spans, with no "
                f"LLM-call span or token ids ({requests}): {FIX_UNRECOGNISED}."
            )
        lines.extend(f"tracerl: {note}" for note in self.notes)
        return "\n".join(lines) or None

    def summary(self, destination: str) -> str:
        """One line: how many spans went where, and what the LLM calls became."""
        http = sum(self.http_llm_spans.values())
        return (
            f"tracerl: {self.spans} spans to {destination}; {self.calls} LLM calls: {self.with_tokens} with exact "
            f"token ids, {sum(self.missing.values())} without, {sum(self.failed.values())} failed; "
            f"{http} HTTP client spans of LLM requests ({self.http_llm_spans['captured']} of captured calls, "
            f"{sum(self.unrecognised.values())} unrecognised)"
        )


STATS = CaptureStats()
