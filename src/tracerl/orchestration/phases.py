"""Seconds per phase of a round, one clock for both drivers: the local loop and a scheduled round time
every phase on it, and their metrics rows read it (``<phase>_seconds``, and ``seconds``, the phases' sum)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class PhaseClock:
    """``with clock("build"):`` times a phase; ``clock.mark("checkpoint")`` starts the next one inside it
    (the save at the end of training). ``on_phase`` is told each phase's name as it starts; ``check``
    is called with a phase's name before ``with`` enters it (a scheduled round raises there when
    asked to stop: between phases, never inside one)."""

    def __init__(self, seconds: dict[str, float] | None = None, on_phase: Callable[[str], None] | None = None,
                 check: Callable[[str], None] | None = None) -> None:
        self.seconds = {} if seconds is None else seconds
        self.on_phase, self.check = on_phase, check
        self.name: str | None = None
        self.started = 0.0
        self.total = 0.0  # every phase this clock timed, whichever part's ``seconds`` it went to

    def __call__(self, name: str) -> PhaseClock:
        if self.check:
            self.check(name)
        self.mark(name)
        return self

    def mark(self, name: str) -> None:
        self._close()
        self.name, self.started = name, time.monotonic()
        if self.on_phase:
            self.on_phase(name)

    def _close(self) -> None:
        if self.name is not None:
            took = time.monotonic() - self.started
            self.seconds[self.name] = round(took, 3)
            self.total += took
            self.name = None

    def __enter__(self) -> PhaseClock:
        return self

    def __exit__(self, *exc: object) -> None:
        self._close()

    @contextmanager
    def part(self, seconds: dict[str, float]) -> Iterator[dict[str, float]]:
        """Phases started in the block go to ``seconds`` (one policy's part of a round that trains several, which
        records its own phases), and still count in ``total``: the round's time is still one clock's."""
        self._close()
        outer, self.seconds = self.seconds, seconds
        try:
            yield seconds
        finally:
            self._close()
            self.seconds = outer

    def fields(self) -> dict[str, float]:
        """The seconds as a metrics row's fields: ``<phase>_seconds``."""
        return {f"{name}_seconds": value for name, value in self.seconds.items()}
