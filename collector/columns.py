"""An OTLP trace request -> the ``spans`` Arrow table, column by column, in one pass.

The collector's hot path. It stores exactly what ``spans_table(trace_rows(request).rows)``
stores, but without a dict per span: each span becomes one tuple of its scalar columns
(the tuples are transposed once per request), resource and scope work is done once per
group, and the token arrays of all spans are concatenated into each list column at once
instead of being converted span by span. The promotion rules come from
:mod:`tracerl.schemas.spans` (``promote``, ``TOKEN_COLUMNS``), the per-field conversions
from :mod:`tracerl.collector.otlp`, so both paths share one definition of every value.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tracerl.collector.otlp import (
    Converted,
    key_values,
    reject_span,
    span_events,
    span_ids,
    span_kind,
    span_links,
    status_code,
)
from tracerl.schemas.spans import (
    PROMOTED_ATTRIBUTES,
    SPANS_SCHEMA,
    TOKEN_COLUMNS,
    decode_tokens,
    promote,
    service_name,
    to_json,
)
from tracerl.schemas.tokens import TokenEncodingError

# The order of each span's tuple of scalar (non-token) columns.
_SCALAR_COLUMNS = (
    "trace_id", "span_id", "parent_span_id", "name", "kind", "start_time_unix_nano", "end_time_unix_nano",
    "status_code", "status_message", "service_name", "scope_name", "scope_version",
    *(column for column, _, _ in PROMOTED_ATTRIBUTES),
    "attributes", "events", "links", "resource",
)
assert set(_SCALAR_COLUMNS) | {c for c, _, _ in TOKEN_COLUMNS} == set(SPANS_SCHEMA.names)


def trace_table(request: ExportTraceServiceRequest) -> tuple[pa.Table, Converted]:
    """The spans table of a request and its per-span rejections (OTLP partial success).

    Raises an Arrow error, ``OverflowError`` or ``ValueError`` only when a value of a
    valid span does not fit the schema (e.g. a uint64 time beyond int64); the caller then
    falls back to the row path, which finds and rejects that span alone.
    """
    out = Converted()
    scalars: list[tuple] = []
    tokens: list[list] = [[] for _ in TOKEN_COLUMNS]
    token_keys = [key for _, key, _ in TOKEN_COLUMNS]
    for group in request.resource_spans:
        resource = key_values(group.resource.attributes)
        resource_json, service = to_json(resource), service_name(resource)
        for scoped in group.scope_spans:
            scope_name, scope_version = scoped.scope.name or None, scoped.scope.version or None
            for span in scoped.spans:
                try:
                    attributes = key_values(span.attributes)
                    decode_tokens(attributes)
                    trace_id, span_id, parent_span_id = span_ids(span)
                except (TokenEncodingError, ValueError) as exc:
                    reject_span(out, span, exc)
                    continue
                for column, key in zip(tokens, token_keys):
                    column.append(attributes.pop(key, None))
                status = span.status
                scalars.append((
                    trace_id, span_id, parent_span_id, span.name, span_kind(span),
                    span.start_time_unix_nano, span.end_time_unix_nano, status_code(span), status.message or None,
                    service, scope_name, scope_version,
                    *promote(attributes).values(),
                    to_json(attributes), to_json(span_events(span)), to_json(span_links(span)), resource_json,
                ))
    columns = dict(zip(_SCALAR_COLUMNS, zip(*scalars))) if scalars else dict.fromkeys(_SCALAR_COLUMNS, ())
    arrays = {name: pa.array(columns[name], type=SPANS_SCHEMA.field(name).type) for name in _SCALAR_COLUMNS}
    for (column, _, dtype), values in zip(TOKEN_COLUMNS, tokens):
        arrays[column] = _list_array(values, np.dtype(dtype), SPANS_SCHEMA.field(column).type)
    return pa.Table.from_arrays([arrays[name] for name in SPANS_SCHEMA.names], schema=SPANS_SCHEMA), out


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
