"""An OTLP trace request -> the ``spans`` Arrow table, column by column.

The collector's hot path. It stores exactly what ``spans_table(trace_rows(request).rows)``
stores, but without a dict per span. Two steps:

1. the request's values as plain Python objects, column by column (``records``): read
   straight from the protobuf bytes by the C extension ``_otlp_wire`` when it is built and
   accepts the body (it also unpacks packed token arrays to bytes and lists the few spans
   whose ids or token attributes need a closer look), else from the parsed message by
   :func:`tracerl.collector.otlp.trace_records`, the definition the extension is tested
   against (every span listed, every token attribute left to ``decode_tokens``);
2. one shared pass: the listed spans go through ``hex_ids`` and ``decode_tokens`` (a bad
   span is rejected alone, with the row path's message), then every column is built at
   once: per-scope values (service, scope, resource JSON) by index, promoted fields by
   ``PROMOTED_ATTRIBUTES``, JSON by ``to_json``, each token list column from one buffer.

The promotion rules and the JSON encoding come from :mod:`tracerl.schemas.spans`
(``PROMOTED_ATTRIBUTES``, ``TOKEN_COLUMNS``, ``decode_tokens``, ``to_json``), the per-field
conversions from :mod:`tracerl.collector.otlp`, so every value has one definition.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tracerl.collector.otlp import Converted, hex_ids, kind_name, parse_protobuf, reject_span, status_name, trace_records
from tracerl.schemas.spans import (
    PROMOTED_ATTRIBUTES,
    SPANS_SCHEMA,
    TOKEN_COLUMNS,
    decode_tokens,
    promote,
    service_name,
    to_json,
)
from tracerl.schemas.tokens import PACKED_PREFIX, TokenEncodingError

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


# The token attributes the C decoder unpacks itself when they come packed: (key, the packed
# prefix of their element type, element size), from the one definition of each.
PACKED_TOKENS = tuple((key, f"{PACKED_PREFIX}{dtype}:", np.dtype(dtype).itemsize) for _, key, dtype in TOKEN_COLUMNS)


def records(
    request: ExportTraceServiceRequest | None, body: bytes | None = None
) -> tuple[list[dict], list[tuple], tuple[list, ...], list[int]]:
    """``trace_records(request)``, from ``body`` (the request's protobuf bytes) when possible.

    ``request`` may be None when ``body`` is given: protobuf then parses ``body`` only if the
    wire decoder cannot read it (raising :class:`~tracerl.collector.otlp.BadPayload` if
    protobuf cannot either). Parsing it up front cost as much as the decoding for spans whose
    token ids are plain int arrays (a message object per id) and was thrown away.
    """
    if HAVE_WIRE_DECODER and body is not None:
        try:
            return _otlp_wire.decode_trace_request(body, PACKED_TOKENS)
        except ValueError:
            pass  # something the decoder does not reproduce exactly (see otlp_wire.c): protobuf reads it
    if request is None:
        request = parse_protobuf(body, ExportTraceServiceRequest)
    return trace_records(request)


def trace_table(request: ExportTraceServiceRequest | None, body: bytes | None = None) -> tuple[pa.Table, Converted]:
    """The spans table of a request and its per-span rejections (OTLP partial success).

    ``body``, if given, must be the protobuf encoding of ``request`` (what was received);
    ``request`` may then be None (parsed only if needed, see :func:`records`).
    Raises an Arrow error, ``OverflowError`` or ``ValueError`` only when a value of a
    valid span does not fit the schema (e.g. a uint64 time beyond int64); the caller then
    falls back to the row path, which finds and rejects that span alone.
    """
    resources, scopes, spans, check = records(request, body)
    out = Converted()
    spans = _valid(spans, check, out)
    if not spans[0]:
        return SPANS_SCHEMA.empty_table(), out
    (scope_index, trace_ids, span_ids, parent_ids, names, kinds, starts, ends, codes, messages, attributes, events, links,
     *unpacked) = spans
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
    take = pa.array(np.array(scope_index, dtype=np.int64))
    for column, values in per_scope.items():
        columns[column] = pa.array(values, type=SPANS_SCHEMA.field(column).type).take(take)
    for (column, key, dtype), items in zip(TOKEN_COLUMNS, unpacked):  # out of the attributes, into typed columns
        values = [a.pop(key, None) if raw is None else raw for a, raw in zip(attributes, items)]
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


def _valid(spans: tuple[list, ...], check: list[int], out: Converted) -> tuple[list, ...]:
    """The spans without those the row path rejects: for each span in ``check``, the ids go
    through ``hex_ids`` and the token attributes through ``decode_tokens`` (in place); a span
    either rejects is rejected alone, with the row path's message."""
    _, trace_ids, span_ids, parent_ids, names, _, _, _, _, _, attributes, *_ = spans
    rejected = set()
    for i in check:
        try:
            decode_tokens(attributes[i])
            trace_ids[i], span_ids[i], parent_ids[i] = hex_ids(
                bytes.fromhex(trace_ids[i]), bytes.fromhex(span_ids[i]), bytes.fromhex(parent_ids[i] or ""))
        except (TokenEncodingError, ValueError) as exc:
            reject_span(out, span_ids[i], names[i], exc)
            rejected.add(i)
    if rejected:
        spans = tuple([v for i, v in enumerate(column) if i not in rejected] for column in spans)
    return spans


def _names(values: list[int], name: Any) -> list[str]:
    """``name(v)`` for each value, computed once per distinct value (a request has a handful)."""
    names = {v: name(v) for v in set(values)}
    return [names[v] for v in values]


def _promoted(attributes: list[dict]) -> dict[str, list]:
    """``schemas.spans.promote`` of every span, as columns (in C when the extension is built:
    the same rules and casts, without the interpreter's loop over spans and keys)."""
    names = [column for column, _, _ in PROMOTED_ATTRIBUTES]
    if HAVE_WIRE_DECODER:
        return dict(zip(names, _otlp_wire.promote_columns(attributes, PROMOTED_ATTRIBUTES)))
    return dict(zip(names, zip(*(promote(a).values() for a in attributes))))


def _list_array(items: list[bytes | np.ndarray | None], dtype: np.dtype, type_: pa.ListType) -> pa.Array:
    """One list column from per-span items (None: no list): the items' little-endian bytes
    (unpacked by the C decoder) or arrays (from ``decode_tokens``). One concatenation, no
    conversion per span or per item; the offsets and validity buffers are made with numpy
    (pyarrow converts Python lists, even of bools, several times slower)."""
    dtype = dtype.newbyteorder("<")
    raw = [x if x is None or type(x) is bytes else x.astype(dtype, copy=False).tobytes() for x in items]
    values = np.frombuffer(b"".join([x for x in raw if x]), dtype=dtype)
    ends = np.cumsum(np.array([len(x) if x else 0 for x in raw], dtype=np.int64)) // dtype.itemsize
    if len(ends) and ends[-1] > np.iinfo(np.int32).max:
        raise OverflowError(f"{ends[-1]} values in one {type_} column of a request")
    offsets = np.zeros(len(raw) + 1, dtype=np.int32)
    offsets[1:] = ends
    validity = None
    if None in raw:
        validity = pa.py_buffer(np.packbits(np.frombuffer(bytes([x is not None for x in raw]), dtype=bool), bitorder="little"))
    return pa.Array.from_buffers(type_, len(raw), [validity, pa.py_buffer(offsets)],
                                 children=[pa.array(values, type=type_.value_type)])
