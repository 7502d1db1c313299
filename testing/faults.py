"""Kill -9 at an exact step: a process that stops dead where a test says, with no cleanup run.

Compaction calls ``tracerl.collector.compaction._at_step`` after each durable step (a file
written, renamed or deleted). :func:`compact_killed_at` runs one pass in a child that calls
``os._exit`` at the N-th step: no ``finally``, no ``__exit__``, no flush, as a SIGKILL leaves it.
Children fork from a forkserver that imported compaction once, so a kill costs milliseconds, and
a property test can afford hundreds.
"""

from __future__ import annotations

import multiprocessing
import os
from functools import cache

KILLED = 137  # the exit status a SIGKILL gives a shell


@cache
def _context() -> multiprocessing.context.ForkServerContext:
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["tracerl.collector.compaction", "pyarrow.parquet"])
    return context


def _pass_killed_at(out: str, settings: dict, now: float, kill_at: int | None) -> None:
    from tracerl.collector import compaction

    steps = 0

    def step(name: str) -> None:
        nonlocal steps
        steps += 1
        if steps == kill_at:
            os._exit(KILLED)

    compaction._at_step = step
    compaction.compact(out, compaction.CompactionSettings(**settings), now=now)


def start_compaction(out: str, settings: dict, now: float, kill_at: int | None) -> multiprocessing.Process:
    """A pass over ``out`` in a child killed at its ``kill_at``-th step (None: it runs to the end); started, not joined."""
    child = _context().Process(target=_pass_killed_at, args=(out, settings, now, kill_at))
    child.start()
    return child


def compact_killed_at(out: str, settings: dict, now: float, kill_at: int | None) -> bool:
    """Run the pass; True if it was killed, False if it ended before step ``kill_at``. A crash is an error."""
    child = start_compaction(out, settings, now, kill_at)
    child.join()
    if child.exitcode not in (0, KILLED):
        raise RuntimeError(f"compaction child exited {child.exitcode} (not the kill, not success): see its stderr")
    return child.exitcode == KILLED
