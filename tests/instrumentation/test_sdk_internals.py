"""The OpenTelemetry SDK internals tracerl relies on, probed on the installed SDK.

When this fails after an SDK upgrade, the message names the SDK's version and each piece
that changed: fix ``src/tracerl/instrumentation/sdk_internals.py`` (the only module that touches them).
Meanwhile capture still works, on the public paths (see each function's docstring).
"""

from __future__ import annotations

import logging

import pytest
from opentelemetry.sdk.trace import Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from tracerl.instrumentation import sdk_internals, setup, span_finisher
from tracerl.instrumentation.processor import TracerlSpanProcessor
from tracerl.instrumentation.sdk_internals import SdkInternalsChanged
from tracerl.instrumentation.settings import settings


def test_every_internal_tracerl_relies_on_is_there():
    sdk_internals.check()


def test_a_missing_piece_is_named_with_the_sdk_version(monkeypatch):
    from opentelemetry.sdk.trace import Tracer

    monkeypatch.delattr(Tracer, "_is_enabled")
    with pytest.raises(SdkInternalsChanged, match=rf"opentelemetry-sdk {sdk_internals.sdk_version()} .*Tracer\._is_enabled"):
        sdk_internals.check()


def test_a_processor_that_starts_doing_something_at_start_is_named(monkeypatch):
    monkeypatch.setattr(SimpleSpanProcessor, "on_start", lambda self, span, parent_context=None: span.set_attribute("x", 1))
    with pytest.raises(SdkInternalsChanged, match=r"SimpleSpanProcessor\.on_start does something"):
        sdk_internals.check()


def test_attribute_writes_that_bypass_the_filter_are_named(monkeypatch):
    def set_attributes(self, attributes):  # an SDK writing around BoundedAttributes' methods
        self._attributes._dict.update(attributes)

    monkeypatch.setattr(Span, "set_attributes", set_attributes)
    with pytest.raises(SdkInternalsChanged, match="content policy would not hold"):
        sdk_internals.check()


class OwnMultiProcessor(SpanProcessor):
    """A provider's multi-processor of another shape (no processors tuple, no lock)."""

    def __init__(self) -> None:
        self.added: list[SpanProcessor] = []

    def add_span_processor(self, processor: SpanProcessor) -> None:
        self.added.append(processor)


def test_without_the_processor_order_the_finisher_runs_on_the_calling_thread(monkeypatch, caplog):
    monkeypatch.setattr(span_finisher.FINISHER, "synchronous", False)
    multi = OwnMultiProcessor()
    provider = TracerProvider(active_span_processor=multi, shutdown_on_exit=False)
    ours = TracerlSpanProcessor(settings())
    with caplog.at_level(logging.WARNING):
        setup._add_first(provider, ours)
    assert multi.added == [ours] and span_finisher.FINISHER.synchronous
    assert f"opentelemetry-sdk {sdk_internals.sdk_version()}" in caplog.text
