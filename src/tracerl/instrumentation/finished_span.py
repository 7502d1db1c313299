"""Hand an LLM call's span, already over, to the provider's span processors.

tracerl makes its own LLM-call spans after the fact (:mod:`tracerl.instrumentation.span_finisher`),
with the call's own start and end times. Nothing happens between that span's start and its
end, so the SDK's machinery for a live span (a lock, every attribute validated as it is
written, the processors' ``on_start``, then ``end`` copying it all into a ``ReadableSpan``)
buys nothing, as long as no processor's ``on_start`` does anything: the SDK's batch and
simple processors, and tracerl's own, whose stamping (episode baggage, agent name, content
policy) is done here by :meth:`TracerlSpanProcessor.finished_attributes`. Then this module
builds the ``ReadableSpan`` the SDK would have built (same sampler, ids, resource, scope)
and calls the processors' ``on_end``: the same span reaches the same exporters for about a
third of the span-finisher's CPU per call (``benchmarks/capture_overhead.py``).

Whenever that is not known to be equivalent (another processor, span limits that could cut
or drop an attribute, a disabled tracer, tracer metrics, an SDK whose internals differ:
what is read of the tracer comes from :func:`~tracerl.instrumentation.sdk_internals.tracer_parts`),
:func:`emit` returns False and the caller goes through the SDK.
"""

from __future__ import annotations

from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from tracerl.instrumentation.parquet_exporter import CommitOnFlush
from tracerl.instrumentation.processor import TracerlSpanProcessor
from tracerl.instrumentation.sdk_internals import PASSIVE_SDK_PROCESSORS, TracerParts, tracer_parts

# Processors whose on_start and _on_ending do nothing (tracerl's does its work in emit); exact
# types, since a subclass may add an on_start.
_PASSIVE_AT_START = PASSIVE_SDK_PROCESSORS | {CommitOnFlush, TracerlSpanProcessor}
_RANDOM_TRACE_ID = getattr(TraceFlags, "RANDOM_TRACE_ID", 0)  # W3C trace context level 2 (newer SDKs)


def _route(tracer: Any) -> tuple[TracerParts, TracerlSpanProcessor | None] | None:
    """The tracer's parts and tracerl's processor among them, or None when only the SDK
    path is exact."""
    parts = tracer_parts(tracer)
    if parts is None or not parts.enabled:
        return None
    if parts.counts_spans:
        return None  # the SDK counts started and ended spans in a meter: let it
    limits = parts.span_limits
    if limits.max_attribute_length is not None or limits.max_span_attribute_length is not None:
        return None  # values would be cut (a packed token array made corrupt, even)
    if not all(type(p) in _PASSIVE_AT_START for p in parts.processors):
        return None
    ours = next((p for p in parts.processors if type(p) is TracerlSpanProcessor), None)
    return parts, ours


def emit(
    tracer: trace.Tracer,
    name: str,
    parent: Context,
    kind: SpanKind,
    attributes: dict[str, Any],
    start_ns: int,
    end_ns: int,
    status: Status = Status(StatusCode.UNSET),
) -> bool:
    """Give the provider's processors the span the SDK would have made; False if not taken."""
    route = _route(tracer)
    if route is None:
        return False
    parts, ours = route
    parent_span = trace.get_current_span(parent).get_span_context()
    if parent_span is None or not parent_span.is_valid:
        parent_span = None
        trace_id = parts.id_generator.generate_trace_id()
        random_trace_id = getattr(parts.id_generator, "is_trace_id_random", lambda: False)()
    else:
        trace_id = parent_span.trace_id
        random_trace_id = bool(parent_span.trace_flags & _RANDOM_TRACE_ID)
    sampled = parts.sampler.should_sample(parent, trace_id, name, kind, attributes, ())
    if not sampled.decision.is_recording():
        return True  # the SDK would have made a non-recording span: nothing to export
    flags = TraceFlags.SAMPLED if sampled.decision.is_sampled() else TraceFlags.DEFAULT
    if random_trace_id:
        flags |= _RANDOM_TRACE_ID
    context = SpanContext(
        trace_id,
        parts.id_generator.generate_span_id(),
        is_remote=False,
        trace_flags=TraceFlags(flags),
        trace_state=sampled.trace_state,
    )
    recorded = dict(sampled.attributes)
    if ours is not None:
        recorded = ours.finished_attributes(recorded, parent)
    if len(recorded) > parts.span_limits.max_span_attributes:
        return False  # the SDK would drop some: let it decide which
    parts.multi.on_end(
        ReadableSpan(
            name=name,
            context=context,
            parent=parent_span,
            resource=parts.resource,
            attributes=recorded,
            kind=kind,
            status=status,
            start_time=start_ns,
            end_time=end_ns,
            instrumentation_info=parts.instrumentation_info,
            instrumentation_scope=parts.instrumentation_scope,
        )
    )
    return True
