"""The judge's evaluation events sent to the user's own OTLP endpoint, configured as every OTel process is.

``tracerl pipeline judge --evaluation-events`` writes its ``gen_ai.evaluation.result`` events into the
data dir's ``logs/`` (:mod:`tracerl.pipeline.judge_events`); where the environment names an OTLP
endpoint for logs, the same events are sent there too, for a trace UI that reads its own collector.
The configuration is the OpenTelemetry SDK's, read by its own OTLP log exporter:

- where: ``OTEL_EXPORTER_OTLP_LOGS_ENDPOINT`` (the full URL, ``.../v1/logs`` over HTTP), else
  ``OTEL_EXPORTER_OTLP_ENDPOINT`` (the base; the exporter adds ``/v1/logs``). Neither set: nothing sent;
- how: ``OTEL_EXPORTER_OTLP_LOGS_PROTOCOL``, else ``OTEL_EXPORTER_OTLP_PROTOCOL``: ``http/protobuf``
  (the default, the exporter tracerl's core installs) or ``grpc`` (``tracerl[collector]`` installs it);
  headers, TLS, compression and timeout from their ``OTEL_EXPORTER_OTLP_[LOGS_]*`` variables;
- off all the same: ``OTEL_LOGS_EXPORTER=none`` or ``OTEL_SDK_DISABLED=true``;
- the resource: ``service.name`` ``tracerl.judge``, with ``OTEL_RESOURCE_ATTRIBUTES``'.

Each event is emitted through the Logs API in a context holding its evaluated span: a
non-recording span with the trace and span id the data dir holds, flagged sampled (a span that
reached the store was exported, so sampled). The records are exported in one batch and the
exporter's result checked: a batch that did not arrive raises :class:`EventsNotSent`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import Any

import tracerl
from tracerl.schemas import attributes as A

HTTP_PROTOBUF, GRPC = "http/protobuf", "grpc"
# what an OTLP record can carry as its span: ids a hand-made span table may not hold (an event parented to none is
# still named by tracerl.episode.id and gen_ai.response.id)
_OTLP_TRACE_ID, _OTLP_SPAN_ID = re.compile(r"[0-9a-f]{32}"), re.compile(r"[0-9a-f]{16}")


class EventsNotSent(RuntimeError):
    """The OTLP endpoint did not take the events (unreachable, refused, a protocol not installed); the message says which."""


def _env(name: str) -> str:
    return os.environ.get(name, "").strip()


def otlp_logs_endpoint() -> str | None:
    """Where the environment sends OTLP logs (as its variable spells it), or None: not configured, or turned off."""
    from opentelemetry.environment_variables import OTEL_LOGS_EXPORTER
    from opentelemetry.sdk.environment_variables import (
        OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_LOGS_ENDPOINT, OTEL_SDK_DISABLED,
    )

    if _env(OTEL_SDK_DISABLED).lower() == "true" or _env(OTEL_LOGS_EXPORTER).lower() == "none":
        return None
    return _env(OTEL_EXPORTER_OTLP_LOGS_ENDPOINT) or _env(OTEL_EXPORTER_OTLP_ENDPOINT) or None


def _protocol() -> str:
    from opentelemetry.sdk.environment_variables import OTEL_EXPORTER_OTLP_LOGS_PROTOCOL, OTEL_EXPORTER_OTLP_PROTOCOL

    return _env(OTEL_EXPORTER_OTLP_LOGS_PROTOCOL) or _env(OTEL_EXPORTER_OTLP_PROTOCOL) or HTTP_PROTOBUF


def _exporter(endpoint: str) -> Any:
    """The SDK's OTLP log exporter for the configured protocol (it reads its endpoint and options from the environment)."""
    protocol = _protocol()
    try:
        if protocol == HTTP_PROTOBUF:
            from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
        elif protocol == GRPC:
            from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter
        else:
            raise EventsNotSent(f"OTLP protocol {protocol!r} (OTEL_EXPORTER_OTLP_[LOGS_]PROTOCOL): the OpenTelemetry SDK's log "
                                f"exporters take {HTTP_PROTOBUF} or {GRPC}; events not sent to {endpoint}")
    except ImportError as exc:
        package = "opentelemetry-exporter-otlp-proto-grpc (or tracerl[collector])" if protocol == GRPC else \
            "opentelemetry-exporter-otlp-proto-http"
        raise EventsNotSent(f"sending OTLP logs over {protocol} needs {exc.name}: pip install {package}; "
                            f"events not sent to {endpoint}") from None
    return OTLPLogExporter()


def send_events(events: Sequence[Any], endpoint: str) -> None:
    """Send ``events`` (:class:`tracerl.pipeline.judge_events.EvaluationEvent`, which imports this module) to the
    configured ``endpoint`` (as :func:`otlp_logs_endpoint` spells it) in one batch."""
    from opentelemetry import context, trace
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import InMemoryLogExporter, SimpleLogRecordProcessor
    from opentelemetry.sdk.resources import Resource

    exporter = _exporter(endpoint)
    emitted = InMemoryLogExporter()
    provider = LoggerProvider(resource=Resource.create({A.SERVICE_NAME: A.JUDGE_AGENT}))
    provider.add_log_record_processor(SimpleLogRecordProcessor(emitted))
    logger = provider.get_logger(A.JUDGE_EVENTS_SCOPE, tracerl.__version__)
    for event in events:
        parent = context.Context()  # never the caller's current span
        if _OTLP_TRACE_ID.fullmatch(event.trace_id or "") and _OTLP_SPAN_ID.fullmatch(event.span_id or ""):
            span = trace.NonRecordingSpan(trace.SpanContext(int(event.trace_id, 16), int(event.span_id, 16), is_remote=True,
                                                            trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED)))
            parent = trace.set_span_in_context(span, parent)
        logger.emit(timestamp=event.time_unix_nano, context=parent, event_name=A.GEN_AI_EVALUATION_RESULT_EVENT,
                    attributes=event.attributes)
    provider.shutdown()
    try:
        result = exporter.export(emitted.get_finished_logs())
    finally:
        exporter.shutdown()
    if result.name != "SUCCESS":
        raise EventsNotSent(f"the OTLP endpoint {endpoint} ({_protocol()}) did not take the {len(events)} event(s) "
                            "(the exporter logged why)")
