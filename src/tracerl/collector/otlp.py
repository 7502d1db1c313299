"""OTLP messages -> table rows, and the OTLP/JSON encoding -> OTLP messages.

Pure functions, no I/O: the HTTP and gRPC front ends and WAL replay all call these, so a
request is converted the same way on first receipt and after a crash. Parsing itself is
left to protobuf (``ParseFromString`` and ``json_format``); only what the OTLP/JSON
encoding changes relative to the proto3 JSON mapping (hex trace/span ids) is handled here.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from tracerl.schemas.logs import log_row
from tracerl.schemas.spans import TOKEN_COLUMNS, decode_tokens, span_row, to_json
from tracerl.schemas.tokens import TokenEncodingError


class BadPayload(ValueError):
    """The request body is not a valid OTLP message; the whole request is refused (400)."""


@dataclass
class Converted:
    """Rows of one request plus what was rejected item by item (OTLP partial success)."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    rejected: int = 0
    errors: list[str] = field(default_factory=list)

    def reject(self, message: str) -> None:
        self.rejected += 1
        if len(self.errors) < 5:  # the reply names a few, not thousands
            self.errors.append(message)

    @property
    def message(self) -> str:
        if not self.rejected:
            return ""
        more = self.rejected - len(self.errors)
        return "; ".join(self.errors) + (f"; and {more} more" if more > 0 else "")


# --- AnyValue -> python ----------------------------------------------------------------

def any_value(value: AnyValue) -> Any:
    """Python value of an OTLP ``AnyValue`` (kvlist -> dict, array -> list, bytes -> bytes)."""
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [any_value(item) for item in value.array_value.values]
    if kind == "kvlist_value":
        return key_values(value.kvlist_value.values)
    return getattr(value, kind)


_SCALARS = frozenset(("string_value", "bool_value", "int_value", "double_value", "bytes_value"))


def key_values(pairs: Iterable[KeyValue]) -> dict[str, Any]:
    """Attributes as a dict (the last of repeated keys wins). Runs for every attribute of
    every span, so scalar values, nearly all of them, are read inline, not via any_value."""
    out = {}
    for pair in pairs:
        value = pair.value
        kind = value.WhichOneof("value")
        out[pair.key] = getattr(value, kind) if kind in _SCALARS else any_value(value)
    return out


# --- traces ----------------------------------------------------------------------------

_KIND = {v: Span.SpanKind.Name(v).removeprefix("SPAN_KIND_") for v in Span.SpanKind.values()}
_STATUS = {v: Status.StatusCode.Name(v).removeprefix("STATUS_CODE_") for v in Status.StatusCode.values()}


def _hex_id(raw: bytes, size: int, what: str) -> str:
    if len(raw) != size or not any(raw):
        raise ValueError(f"{what} must be {size} non-zero bytes, got {len(raw)} bytes")
    return raw.hex()


def _items(groups: Iterable[Message], scoped_field: str, items_field: str) -> Iterator[tuple[dict, Message, Message]]:
    """(resource attributes, scope, item) for every span or log record of a request."""
    for group in groups:
        resource = key_values(group.resource.attributes)
        for scoped in getattr(group, scoped_field):
            for item in getattr(scoped, items_field):
                yield resource, scoped.scope, item


def trace_rows(request: ExportTraceServiceRequest) -> Converted:
    """One ``spans`` row per valid span; an invalid span is rejected alone, with a message."""
    out = Converted()
    encoded: tuple[dict | None, str | None] = (None, None)  # the resource's JSON, once per resource
    for resource, scope, span in _items(request.resource_spans, "scope_spans", "spans"):
        if encoded[0] is not resource:
            encoded = (resource, to_json(resource))
        try:
            out.rows.append(_span_row(span, resource, encoded[1], scope.name or None, scope.version or None))
        except (TokenEncodingError, ValueError) as exc:
            reject_span(out, span.span_id.hex(), span.name, exc)
    return out


# Token attributes are decoded strictly into numpy arrays before span_row sees them:
# untrusted input is checked against the int32/float32 columns, and Arrow builds the
# list columns from numpy arrays without a Python int per token.
def span_ids(span: Span) -> tuple[str, str, str | None]:
    """(trace_id, span_id, parent_span_id) as hex; ``ValueError`` for an invalid id."""
    return hex_ids(span.trace_id, span.span_id, span.parent_span_id)


def hex_ids(trace_id: bytes, span_id: bytes, parent_span_id: bytes) -> tuple[str, str, str | None]:
    """:func:`span_ids` of a span's raw id fields (what both trace record sources give)."""
    return _hex_id(trace_id, 16, "trace_id"), _hex_id(span_id, 8, "span_id"), parent_span_id.hex() or None


def span_events(span: Span) -> list[dict[str, Any]]:
    return [{"name": e.name, "time_unix_nano": e.time_unix_nano, "attributes": key_values(e.attributes)} for e in span.events]


def span_links(span: Span) -> list[dict[str, Any]]:
    return [
        {"trace_id": link.trace_id.hex(), "span_id": link.span_id.hex(), "attributes": key_values(link.attributes)}
        for link in span.links
    ]


def span_kind(span: Span) -> str:
    return kind_name(span.kind)


def status_code(span: Span) -> str:
    return status_name(span.status.code)


def kind_name(kind: int) -> str:
    """``SPAN_KIND_CLIENT`` (3) -> ``"CLIENT"``; an unknown value as its number."""
    return _KIND.get(kind) or str(kind)


def status_name(code: int) -> str:
    """``STATUS_CODE_ERROR`` (2) -> ``"ERROR"``; an unknown value as its number."""
    return _STATUS.get(code) or str(code)


def _span_row(
    span: Span, resource: dict[str, Any], resource_json: str | None, scope_name: str | None, scope_version: str | None
) -> dict:
    attributes = key_values(span.attributes)
    decode_tokens(attributes)
    trace_id, span_id, parent_span_id = span_ids(span)
    return span_row(
        trace_id=trace_id,
        span_id=span_id,
        parent_span_id=parent_span_id,
        name=span.name,
        kind=span_kind(span),
        start_time_unix_nano=span.start_time_unix_nano,
        end_time_unix_nano=span.end_time_unix_nano,
        status_code=status_code(span),
        status_message=span.status.message or None,
        attributes=attributes,
        events=span_events(span),
        links=span_links(span),
        resource=resource,
        resource_json=resource_json,
        scope_name=scope_name,
        scope_version=scope_version,
    )


def reject_span(out: Converted, span_id: str, name: str, exc: Exception) -> None:
    """Reject a span (``span_id`` in hex) with why, in the words of the row path."""
    out.reject(f"span {span_id or '?'} ({name[:64]!r}): {exc}")


# --- trace records: the values of a request, before promotion, JSON and Arrow -------------

#: The columns of :func:`trace_records`' spans, before one column per ``TOKEN_COLUMNS`` entry.
SPAN_RECORD_COLUMNS = (
    "scope_index", "trace_id", "span_id", "parent_span_id", "name", "kind", "start_time_unix_nano",
    "end_time_unix_nano", "status_code", "status_message", "attributes", "events", "links",
)


def trace_records(request: ExportTraceServiceRequest) -> tuple[list[dict], list[tuple], tuple[list, ...], list[int]]:
    """(resources, scopes, spans, check) of a request: what the column builder needs, as plain values.

    resources: :func:`key_values` of each resource; scopes: (resource index, name or None,
    version or None); spans: one list per column (:data:`SPAN_RECORD_COLUMNS`: scope index,
    trace/span/parent ids in hex (parent None when empty), name, kind and status code as
    ints, status message or None, attributes as :func:`key_values`, events and links as
    :func:`span_events` and :func:`span_links` or ``()`` when none: most spans have none, and
    an empty list per span made the garbage collector run twice as often), then one per
    ``TOKEN_COLUMNS`` entry: the token attributes' items when a reader unpacked them itself
    (then they are not in the attributes), else None; check: the indices of the spans that
    :func:`hex_ids` and ``decode_tokens`` must still look at.

    This reader leaves every token attribute to ``decode_tokens`` and every span to be
    checked. The C extension ``_otlp_wire`` computes the same from the protobuf bytes
    (``decode_trace_request``) several times faster, unpacks packed token strings, and lists
    only the spans with unusual ids or token attributes left; this is the definition it is
    tested against, and the fallback when it is missing or declines a body.
    """
    resources: list[dict] = []
    scopes: list[tuple] = []
    rows = []
    for group in request.resource_spans:
        resource_index = len(resources)
        resources.append(key_values(group.resource.attributes))
        for scoped in group.scope_spans:
            scope_index = len(scopes)
            scopes.append((resource_index, scoped.scope.name or None, scoped.scope.version or None))
            for span in scoped.spans:
                status = span.status
                rows.append((
                    scope_index, span.trace_id.hex(), span.span_id.hex(), span.parent_span_id.hex() or None, span.name,
                    span.kind, span.start_time_unix_nano, span.end_time_unix_nano, status.code, status.message or None,
                    key_values(span.attributes), span_events(span) or (), span_links(span) or (),
                ))
    spans = tuple(map(list, zip(*rows))) if rows else tuple([] for _ in SPAN_RECORD_COLUMNS)
    return resources, scopes, spans + tuple([None] * len(rows) for _ in TOKEN_COLUMNS), list(range(len(rows)))


# --- logs ------------------------------------------------------------------------------

def log_rows(request: ExportLogsServiceRequest) -> Converted:
    """One ``logs`` row per log record (GenAI events carry message content here)."""
    out = Converted()
    for resource, scope, record in _items(request.resource_logs, "scope_logs", "log_records"):
        out.rows.append(
            log_row(
                trace_id=record.trace_id.hex() or None,
                span_id=record.span_id.hex() or None,
                time_unix_nano=record.time_unix_nano or None,
                observed_time_unix_nano=record.observed_time_unix_nano or None,
                severity_number=record.severity_number or None,
                severity_text=record.severity_text or None,
                event_name=record.event_name or None,
                body=any_value(record.body) if record.HasField("body") else None,
                attributes=key_values(record.attributes),
                resource=resource,
                scope_name=scope.name or None,
                scope_version=scope.version or None,
            )
        )
    return out


# --- parsing ---------------------------------------------------------------------------

def parse_protobuf(body: bytes, message_type: type[Message]) -> Message:
    message = message_type()
    try:
        message.ParseFromString(body)
    except DecodeError as exc:
        raise BadPayload(f"body is not a valid {message_type.__name__} protobuf: {exc}") from exc
    return message


# OTLP/JSON differs from the proto3 JSON mapping only in ids: hex instead of base64.
_ID_KEYS = ("traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id")
# Where ids occur: resourceSpans[].scopeSpans[].spans[] (+ .links[]), resourceLogs[].scopeLogs[].logRecords[]
_ID_PATHS = {
    ExportTraceServiceRequest: (("resourceSpans", "resource_spans"), ("scopeSpans", "scope_spans"), ("spans",)),
    ExportLogsServiceRequest: (("resourceLogs", "resource_logs"), ("scopeLogs", "scope_logs"), ("logRecords", "log_records")),
}


def parse_json(body: bytes, message_type: type[Message]) -> Message:
    """Parse an OTLP/JSON body (hex ids, camelCase, int64 as strings) into ``message_type``."""
    try:
        document = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadPayload(f"body is not valid JSON: {exc}") from exc
    except RecursionError:
        raise BadPayload("body is not valid OTLP/JSON: nested too deep") from None
    if not isinstance(document, dict):
        raise BadPayload(f"body must be a JSON object, got {type(document).__name__}")
    try:
        _ids_hex_to_base64(document, _ID_PATHS[message_type], message_type.__name__)
        return json_format.ParseDict(document, message_type(), ignore_unknown_fields=True)
    except json_format.ParseError as exc:
        raise BadPayload(f"body is not a valid OTLP/JSON {message_type.__name__}: {exc}") from exc
    except RecursionError:
        raise BadPayload(f"body is not a valid OTLP/JSON {message_type.__name__}: nested too deep") from None


def _children(node: dict, names: tuple[str, ...], where: str) -> list[tuple[str, dict]]:
    for name in names:
        if name in node:
            items = node[name]
            if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
                raise BadPayload(f"{where}.{name} must be a list of objects")
            return [(f"{where}.{name}[{i}]", item) for i, item in enumerate(items)]
    return []


def _ids_hex_to_base64(document: dict, path: tuple[tuple[str, ...], ...], root: str) -> None:
    level = [(root, document)]
    for names in path:
        level = [child for where, node in level for child in _children(node, names, where)]
    for where, item in level:
        _convert_ids(item, where)
        for link_where, link in _children(item, ("links",), where):
            _convert_ids(link, link_where)


def _convert_ids(item: dict, where: str) -> None:
    for key in _ID_KEYS:
        value = item.get(key)
        if value is None or value == "":
            continue
        if not isinstance(value, str):
            raise BadPayload(f"{where}.{key} must be a hex string, got {type(value).__name__}")
        try:
            item[key] = base64.b64encode(bytes.fromhex(value)).decode()
        except ValueError as exc:
            raise BadPayload(f"{where}.{key} is not hex: {value[:40]!r}") from exc


def message_json(message: Message) -> bytes:
    """OTLP/JSON text of a response message (camelCase, int64 as strings)."""
    return json_format.MessageToJson(message, indent=None).encode()

