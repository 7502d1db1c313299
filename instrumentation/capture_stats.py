"""Process-wide counts of LLM calls with and without exact tokens.

A call without token ids cannot be trained on; it is never dropped in silence: it is
marked on its span (:mod:`~tracerl.instrumentation.token_attributes`), counted here, and
the count is reported as a warning when the process exits.
"""

from __future__ import annotations

import threading
from collections import Counter


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
