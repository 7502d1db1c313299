"""The span finisher: LLM-call spans are made off the agent's calling thread, in batches.

What an agent waits for on each LLM call should be the call, not its recording. The hook
therefore does on the calling thread only what cannot wait (rewrite the request, strip
the response before the SDK reads it, note the times, the parent context and the agent
name), and hands the rest (parsing the response, the span's attributes, packing the
token arrays, starting and ending the span, the span processors) to one background
thread, in submission order: the same bargain OpenTelemetry's ``BatchSpanProcessor``
makes for exporting.

The thread works in batches: woken by a job, it lets :data:`BATCH_DELAY_S` of further
jobs gather and then runs them all. A job run alone, between two stretches of the agent's
own work, runs on cold caches (the same Python costs 3-5x a warm loop) and takes the GIL
from the agent twice; a batch pays that once (``benchmarks/capture_overhead.py``: about
half the thread's CPU per call at 200 ms, and ~30 us per call less again at one second,
the rhythm at which the batch span processor hands spans to the Parquet exporter anyway).
Jobs hold bytes, not parsed JSON, so waiting costs the garbage collector nothing. The
thread still needs the GIL, so what the agent saves is the recording's CPU on its own
thread, not all contention. (Holding jobs back until the agent next blocks on the
network was tried too: on a machine whose cores the LLM server shares, the jobs then
compete with the server instead.)

Nothing is lost to the deferral: :func:`drain` runs first in the tracer provider's
``force_flush`` and ``shutdown`` (tracerl's processor is put first), and at interpreter
exit; it cuts the batch's wait short. A backlog beyond :data:`MAX_BACKLOG` jobs runs on
the calling thread instead of growing without bound.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from collections.abc import Callable

logger = logging.getLogger(__name__)

MAX_BACKLOG = 10_000
BATCH_DELAY_S = 1.0

Job = Callable[[], None]


class SpanFinisher:
    """One daemon thread running submitted jobs in order; :meth:`drain` waits for all.

    A ``queue.SimpleQueue`` (C, no Python-level lock) keeps :meth:`submit` to a put on
    the agent's thread; :meth:`drain` queues a marker, wakes the worker from its batch
    wait and waits for it to reach the marker.
    """

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[Job] = queue.SimpleQueue()
        self._start_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._wake = threading.Event()  # set by drain: run the batch now
        # Set when tracerl's processor could not be put first on the provider: then a flush
        # could run before a deferred span ends, so jobs run on the calling thread instead.
        self.synchronous = False

    def submit(self, job: Job) -> None:
        if self.synchronous:
            _run(job)
        elif self._jobs.qsize() >= MAX_BACKLOG:
            _run(job)  # backpressure: the agent pays for its own call rather than memory growing
        else:
            self._jobs.put(job)
            if self._thread is None:
                self._start()

    def drain(self, timeout_s: float = 30.0) -> bool:
        """Wait until every job submitted so far has run; False on timeout."""
        if self._thread is None or threading.current_thread() is self._thread:
            return True  # nothing started; or a job flushing the provider, which must not wait for itself
        reached = threading.Event()
        self._jobs.put(reached.set)
        self._wake.set()
        return reached.wait(timeout_s)

    def _start(self) -> None:
        with self._start_lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name="tracerl-span-finisher", daemon=True)
                self._thread.start()

    def _work(self) -> None:
        jobs, wake = self._jobs, self._wake
        while True:
            first = jobs.get()
            wake.wait(BATCH_DELAY_S)
            wake.clear()  # a drain's marker is queued before its wake: this batch runs it
            _run(first)
            while True:
                try:
                    job = jobs.get_nowait()
                except queue.Empty:
                    break
                _run(job)

    def _after_fork(self) -> None:
        # the thread did not survive the fork, and jobs queued by the parent are the parent's to run
        self._jobs = queue.SimpleQueue()
        self._start_lock = threading.Lock()
        self._wake = threading.Event()
        self._thread = None


def _run(job: Job) -> None:
    try:
        job()
    except Exception:  # a recording bug must never reach the agent, nor stop later spans
        logger.exception("tracerl: finishing an LLM-call span failed")


FINISHER = SpanFinisher()
submit = FINISHER.submit
drain = FINISHER.drain

if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=FINISHER._after_fork)
