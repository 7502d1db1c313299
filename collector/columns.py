"""An OTLP trace request -> the ``spans`` Arrow table, column by column.

The collector's hot path. It stores exactly what ``spans_table(trace_rows(request).rows)``
stores, but without a dict per span. Two steps:

1. the request's values as plain Python objects (``records``): read straight from the
   protobuf bytes by the C extension ``_otlp_wire`` when it is built and accepts the body,
   else from the parsed message by :func:`tracerl.collector.otlp.trace_records`, the
   definition the extension is tested against;
2. one shared pass that validates ids and token arrays span by span (rejecting a bad span
   alone, with the row path's message) and then builds every column at once: per-scope
   values (service, scope, resource JSON) by index, promoted fields and JSON by list
   comprehension, token arrays by one concatenation per column.

The promotion rules and the JSON encoding come from :mod:`tracerl.schemas.spans`
(``PROMOTED_ATTRIBUTES``, ``TOKEN_COLUMNS``, ``decode_tokens``, ``to_json``), the per-field
conversions from :mod:`tracerl.collector.otlp`, so every value has one definition.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tracerl.collector.otlp import Converted, hex_ids, kind_name, reject_span, status_name, trace_records
from tracerl.schemas.spans import (
    PROMOTED_ATTRIBUTES,
    SPANS_SCHEMA,
    TOKEN_COLUMNS,
    decode_tokens,
    service_name,
    to_json,
)
from tracerl.schemas.tokens import TokenEncodingError

try:
    from tracerl.collector import _otlp_wire
except ImportError:  # installed without a C compiler: protobuf objects only (several times slower)
    _otlp_wire = None

HAVE_WIRE_DECODER = _otlp_wire is not None
#: Which reader step 1 uses; the collector logs it once at start.
CONVERTER = (
    "OTLP wire decoder (C extension tracerl.collector._otlp_wire)" if HAVE_WIRE_DECODER
    else "protobuf objects (pure Python; the C extension tracerl.collector._otlp_wire is not built)"
)


def records(request: ExportTraceServiceRequest, body: bytes | None = None) -> tuple[list[dict], list[tuple], list[tuple]]:
    """``trace_records(request)``, from ``body`` (the request's protobuf bytes) when possible."""
    if HAVE_WIRE_DECODER and body is not None:
        try:
            return _otlp_wire.decode_trace_request(body)
        except ValueError:
            pass  # something the decoder does not reproduce exactly (see otlp_wire.c): protobuf reads it
    return trace_records(request)


def trace_table(request: ExportTraceServiceRequest, body: bytes | None = None) -> tuple[pa.Table, Converted]:
    """The spans table of a request and its per-span rejections (OTLP partial success).

    ``body``, if given, must be the protobuf encoding of ``request`` (what was received).
    Raises an Arrow error, ``OverflowError`` or ``ValueError`` only when a value of a
    valid span does not fit the schema (e.g. a uint64 time beyond int64); the caller then
    falls back to the row path, which finds and rejects that span alone.
    """
    resources, scopes, spans = records(request, body)
    out = Converted()
    kept, ids = [], []
    for span in spans:
        try:
            decode_tokens(span[10])
            ids.append(hex_ids(span[1], span[2], span[3]))
        except (TokenEncodingError, ValueError) as exc:
            reject_span(out, span[2], span[4], exc)
            continue
        kept.append(span)
    n = len(kept)
    if not n:
        return SPANS_SCHEMA.empty_table(), out
    (scope_index, _, _, _, names, kinds, starts, ends, codes, messages, attributes, events, links) = zip(*kept)
    trace_ids, span_ids, parent_ids = zip(*ids)
    columns: dict[str, Any] = {
        "trace_id": trace_ids, "span_id": span_ids, "parent_span_id": parent_ids, "name": names,
        "kind": _names(kinds, kind_name), "start_time_unix_nano": starts, "end_time_unix_nano": ends,
        "status_code": _names(codes, status_name), "status_message": messages,
    }
    # one value per scope (service and resource JSON once per resource), taken by index
    resource_columns = [(service_name(r), to_json(r)) for r in resources]
    per_scope = {"service_name": [], "scope_name": [], "scope_version": [], "resource": []}
    for resource_index, name, version in scopes:
        service, resource_json = resource_columns[resource_index]
        for column, value in zip(per_scope, (service, name, version, resource_json)):
            per_scope[column].append(value)
    take = pa.array(np.fromiter(scope_index, dtype=np.int64, count=n))
    for column, values in per_scope.items():
        columns[column] = pa.array(values, type=SPANS_SCHEMA.field(column).type).take(take)
    for column, key, dtype in TOKEN_COLUMNS:  # moved out of the attributes into typed columns
        values = [a.pop(key, None) for a in attributes]
        columns[column] = _list_array(values, np.dtype(dtype), SPANS_SCHEMA.field(column).type)
    columns.update(_promoted(attributes))
    columns["attributes"] = [to_json(a) for a in attributes]
    columns["events"] = [to_json(e) for e in events]
    columns["links"] = [to_json(link) for link in links]
    arrays = [
        value if isinstance(value, pa.Array) else pa.array(value, type=field.type)
        for value, field in ((columns[field.name], field) for field in SPANS_SCHEMA)
    ]
    return pa.Table.from_arrays(arrays, schema=SPANS_SCHEMA), out


def _names(values: tuple[int, ...], name: Any) -> list[str]:
    """``name(v)`` for each value, computed once per distinct value (a request has a handful)."""
    names = {v: name(v) for v in set(values)}
    return [names[v] for v in values]


def _promoted(attributes: tuple[dict, ...]) -> dict[str, list]:
    """``schemas.spans.promote`` of every span, column by column: for each promoted column the
    value of the first of its keys present, cast (``PROMOTED_ATTRIBUTES`` is the rule)."""
    columns = {}
    for column, keys, cast in PROMOTED_ATTRIBUTES:
        if len(keys) == 1:
            key = keys[0]
            columns[column] = [cast(a[key]) if key in a else None for a in attributes]
        else:
            columns[column] = [next((cast(a[key]) for key in keys if key in a), None) for a in attributes]
    return columns


def _list_array(arrays: list[np.ndarray | None], dtype: np.dtype, type_: pa.ListType) -> pa.Array:
    """One list column from per-span numpy arrays (or ``None``): one concatenation, no per-span conversion."""
    present = [a for a in arrays if a is not None]
    values = np.concatenate(present).astype(dtype, copy=False) if present else np.empty(0, dtype=dtype)
    lengths = np.fromiter((0 if a is None else len(a) for a in arrays), dtype=np.int64, count=len(arrays))
    ends = np.cumsum(lengths)
    if len(ends) and ends[-1] > np.iinfo(np.int32).max:
        raise OverflowError(f"{ends[-1]} values in one {type_} column of a request")
    offsets = np.concatenate(([0], ends)).astype(np.int32)
    mask = None
    if len(present) != len(arrays):
        mask = pa.array(np.fromiter((a is None for a in arrays), dtype=bool, count=len(arrays)))
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values, type=type_.value_type), type=type_, mask=mask)
