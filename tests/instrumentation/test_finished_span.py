"""An LLM call's span handed to the processors already over is the span the SDK makes.

tracerl's own LLM-call spans skip the SDK's live-span machinery when no processor needs it
(``finished_span.emit``); these tests make the same span both ways, on providers set up
alike, and compare what the exporter receives; and check that anything the shortcut cannot
reproduce exactly sends the span through the SDK instead.
"""

from __future__ import annotations

import pytest
from opentelemetry import baggage, context, trace
from opentelemetry.sdk.trace import ConcurrentMultiSpanProcessor, SpanLimits, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from opentelemetry.trace import SpanKind, Status, StatusCode

from tracerl.instrumentation import finished_span
from tracerl.instrumentation.processor import TracerlSpanProcessor
from tracerl.instrumentation.settings import settings
from tracerl.schemas import attributes as A

ATTRIBUTES = {
    A.GEN_AI_OPERATION: "chat",
    A.GEN_AI_REQUEST_MODEL: "m",
    A.GEN_AI_RESPONSE_FINISH_REASONS: ["tool_calls"],
    A.GEN_AI_USAGE_INPUT_TOKENS: 12,
    A.GEN_AI_REQUEST_TEMPERATURE: 0.5,
    A.GEN_AI_INPUT_MESSAGES: '[{"role":"user","content":"my key is sk-abcdefghijklmnopqrstuvwx"}]',
    "http.request.header.authorization": "Bearer abc",  # never recorded
    A.PROMPT_TOKEN_IDS: "tokpack:i4:AQAAAAIAAAA=",
}


def provider_with(*processors: SpanProcessor, **options) -> tuple[TracerProvider, InMemorySpanExporter]:
    provider = TracerProvider(**options)
    exporter = InMemorySpanExporter()
    for processor in (TracerlSpanProcessor(settings()), *processors, SimpleSpanProcessor(exporter)):
        provider.add_span_processor(processor)
    return provider, exporter


def parent_context() -> context.Context:
    """A parent span in an episode (baggage), as an agent's own code would open."""
    ctx = baggage.set_baggage(A.EPISODE_ID, "ep-7", context.get_current())
    parent = trace.NonRecordingSpan(
        trace.SpanContext(0xABC, 0xDEF, is_remote=False, trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED))
    )
    return trace.set_span_in_context(parent, ctx)


def through_sdk(provider: TracerProvider, parent: context.Context, status: Status):
    span = provider.get_tracer("tracerl").start_span(
        "chat m", context=parent, kind=SpanKind.CLIENT, attributes=ATTRIBUTES, start_time=1_000
    )
    span.set_status(status)
    span.end(end_time=2_000)


@pytest.mark.parametrize("status", [Status(StatusCode.UNSET), Status(StatusCode.ERROR, "prompt too long")])
def test_the_finished_span_is_what_the_sdk_would_have_exported(status):
    direct, direct_out = provider_with()
    sdk, sdk_out = provider_with()
    parent = parent_context()
    assert finished_span.emit(direct.get_tracer("tracerl"), "chat m", parent, SpanKind.CLIENT, dict(ATTRIBUTES), 1_000, 2_000, status)
    through_sdk(sdk, parent, status)

    (ours,), (theirs,) = direct_out.get_finished_spans(), sdk_out.get_finished_spans()
    assert dict(ours.attributes) == {k: list(v) if isinstance(v, tuple) else v for k, v in theirs.attributes.items()}
    assert ours.attributes[A.EPISODE_ID] == "ep-7"  # stamped from baggage, as on_start does
    assert "http.request.header.authorization" not in ours.attributes  # policed, as on_start does
    assert "sk-abcdefghijklmnopqrstuvwx" not in ours.attributes[A.GEN_AI_INPUT_MESSAGES]
    for field in ("name", "kind", "parent", "start_time", "end_time", "resource", "instrumentation_scope"):
        assert getattr(ours, field) == getattr(theirs, field), field
    assert (ours.status.status_code, ours.status.description) == (theirs.status.status_code, theirs.status.description)
    assert ours.context.trace_id == theirs.context.trace_id == 0xABC
    assert ours.context.trace_flags == theirs.context.trace_flags
    assert ours.context.span_id not in (0, theirs.context.span_id)


def test_a_root_call_gets_a_trace_of_its_own():
    provider, out = provider_with()
    tracer = provider.get_tracer("tracerl")
    for _ in range(2):
        assert finished_span.emit(tracer, "chat m", context.Context(), SpanKind.CLIENT, dict(ATTRIBUTES), 1, 2)
    first, second = out.get_finished_spans()
    assert first.parent is None and first.context.trace_id != second.context.trace_id


def test_a_sampler_that_drops_the_call_is_obeyed():
    provider, out = provider_with(sampler=ALWAYS_OFF)
    assert finished_span.emit(provider.get_tracer("tracerl"), "chat m", parent_context(), SpanKind.CLIENT, dict(ATTRIBUTES), 1, 2)
    assert out.get_finished_spans() == ()


class AddsAtStart(SpanProcessor):
    """A user's processor that writes on spans as they start: only the SDK calls it."""

    def on_start(self, span, parent_context=None):
        span.set_attribute("team", "search")


@pytest.mark.parametrize(
    "setup",
    [
        {"processors": (AddsAtStart(),)},
        {"span_limits": SpanLimits(max_attribute_length=16)},  # would cut a packed token array
        {"span_limits": SpanLimits(max_span_attributes=3)},  # would drop attributes
        {"active_span_processor": ConcurrentMultiSpanProcessor(1), "shutdown_on_exit": False},  # another multi-processor
    ],
    ids=["processor with on_start", "value length limit", "attribute count limit", "concurrent processors"],
)
def test_what_the_shortcut_cannot_reproduce_goes_through_the_sdk(setup):
    provider, out = provider_with(*setup.pop("processors", ()), **setup)
    attributes = dict(ATTRIBUTES)
    assert not finished_span.emit(provider.get_tracer("tracerl"), "chat m", parent_context(), SpanKind.CLIENT, attributes, 1, 2)
    assert out.get_finished_spans() == ()  # nothing sent twice: the caller makes it the SDK's way


class BatchWithOnStart(SimpleSpanProcessor):
    """A subclass of a passive processor may not be passive."""

    def on_start(self, span, parent_context=None):
        span.set_attribute("team", "search")


def test_a_subclass_of_a_passive_processor_is_not_taken_for_one():
    provider, _ = provider_with(BatchWithOnStart(InMemorySpanExporter()))
    assert not finished_span.emit(provider.get_tracer("tracerl"), "chat m", parent_context(), SpanKind.CLIENT, dict(ATTRIBUTES), 1, 2)
