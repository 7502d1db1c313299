"""The span finisher: jobs run off the calling thread, in order, and nothing is lost to it.

Each test uses its own :class:`SpanFinisher` (the process-wide one serves the hook) with
its real daemon thread; ``drain`` is what a flush of the tracer provider waits on.
"""

from __future__ import annotations

import threading
import time

import pytest
from opentelemetry import trace

from tracerl.instrumentation import span_finisher
from tracerl.instrumentation.span_finisher import SpanFinisher


def test_jobs_run_in_submission_order_on_the_finisher_thread():
    finisher = SpanFinisher()
    ran: list[tuple[int, str]] = []
    for i in range(50):
        finisher.submit(lambda i=i: ran.append((i, threading.current_thread().name)))
    assert finisher.drain(10)
    assert [i for i, _ in ran] == list(range(50))
    assert {name for _, name in ran} == {"tracerl-span-finisher"}


def test_drain_cuts_the_batch_wait_short(monkeypatch):
    monkeypatch.setattr(span_finisher, "BATCH_DELAY_S", 600.0)  # a batch that would gather for ten minutes
    finisher = SpanFinisher()
    ran = []
    finisher.submit(lambda: ran.append(1))
    assert finisher.drain(10) and ran == [1]


def test_a_failing_job_is_logged_and_later_jobs_still_run(caplog):
    finisher = SpanFinisher()
    ran = []
    finisher.submit(lambda: 1 / 0)
    finisher.submit(lambda: ran.append("after"))
    assert finisher.drain(10)
    assert ran == ["after"] and "finishing an LLM-call span failed" in caplog.text


def test_a_backlog_beyond_the_limit_runs_on_the_calling_thread(monkeypatch):
    monkeypatch.setattr(span_finisher, "MAX_BACKLOG", 2)
    finisher = SpanFinisher()
    busy, hold = threading.Event(), threading.Event()
    finisher.submit(lambda: (busy.set(), hold.wait()))
    assert busy.wait(10)  # the worker is inside its first job: the queue is empty and now fills
    ran_on = []
    for _ in range(4):
        finisher.submit(lambda: ran_on.append(threading.current_thread().name))
    assert ran_on == [threading.current_thread().name] * 2  # the third and fourth: backpressure
    hold.set()
    assert finisher.drain(10) and len(ran_on) == 4


def test_a_synchronous_finisher_runs_each_job_at_once():
    finisher = SpanFinisher()
    finisher.synchronous = True  # what setup does when tracerl's processor cannot go first
    ran = []
    finisher.submit(lambda: ran.append(threading.current_thread().name))
    assert ran == [threading.current_thread().name]


@pytest.mark.usefixtures("spans")  # the process's provider, with tracerl's processor first
def test_a_flush_from_inside_a_finishing_span_does_not_wait_for_itself():
    results = []
    started = time.monotonic()
    span_finisher.submit(lambda: results.append(trace.get_tracer_provider().force_flush()))
    assert span_finisher.drain(10) and results == [True] and time.monotonic() - started < 5
