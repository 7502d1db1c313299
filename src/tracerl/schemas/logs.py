"""The ``logs`` table: OTLP log records, above all GenAI events with message content.

Official GenAI instrumentations (e.g. ``opentelemetry-instrumentation-openai-v2``) put
prompts and completions in log events (``gen_ai.user.message``, ``gen_ai.choice``,
``gen_ai.client.inference.operation.details``) rather than on the span. Each row keeps
the ``trace_id``/``span_id`` of the span it belongs to, so the pipeline can join the
content to the LLM call span. Body, attributes and resource are JSON text (lossless,
same encoding as the ``spans`` table).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow as pa

from tracerl.schemas import attributes as A
from tracerl.schemas.spans import json_text, service_name, to_json
from tracerl.schemas.versioned import versioned_schema

LOGS_SCHEMA_VERSION = 1

LOGS_SCHEMA = versioned_schema(
    "logs",
    LOGS_SCHEMA_VERSION,
    [
        pa.field("trace_id", pa.string()),
        pa.field("span_id", pa.string()),
        pa.field("time_unix_nano", pa.int64()),
        pa.field("observed_time_unix_nano", pa.int64()),
        pa.field("severity_number", pa.int32()),
        pa.field("severity_text", pa.string()),
        # LogRecord.event_name, else the older ``event.name`` attribute
        pa.field("event_name", pa.string()),
        pa.field("service_name", pa.string()),
        pa.field("scope_name", pa.string()),
        pa.field("scope_version", pa.string()),
        pa.field("body", pa.string()),  # JSON text of the AnyValue body
        pa.field("attributes", pa.string()),
        pa.field("resource", pa.string()),
    ],
)


def log_row(
    *,
    trace_id: str | None,
    span_id: str | None,
    time_unix_nano: int | None,
    observed_time_unix_nano: int | None,
    severity_number: int | None,
    severity_text: str | None,
    event_name: str | None,
    body: Any,
    attributes: Mapping[str, Any],
    resource: Mapping[str, Any] | None = None,
    scope_name: str | None = None,
    scope_version: str | None = None,
) -> dict[str, Any]:
    """Build one row of :data:`LOGS_SCHEMA`."""
    resource = resource or {}
    event = event_name or attributes.get(A.EVENT_NAME)
    return {
        "trace_id": trace_id or None,
        "span_id": span_id or None,
        "time_unix_nano": time_unix_nano,
        "observed_time_unix_nano": observed_time_unix_nano,
        "severity_number": severity_number,
        "severity_text": severity_text,
        "event_name": None if event is None else str(event),
        "service_name": service_name(resource),
        "scope_name": scope_name,
        "scope_version": scope_version,
        "body": None if body is None else json_text(body),
        "attributes": to_json(attributes),
        "resource": to_json(resource),
    }


def logs_table(rows: Iterable[Mapping[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(list(rows), schema=LOGS_SCHEMA)
