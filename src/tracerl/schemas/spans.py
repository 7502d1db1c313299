"""The ``spans`` table: one row per span, lossless, with the hot fields promoted.

Both writers of spans (the in-process Parquet exporter and the OTLP collector) build
rows with :func:`span_row`, so the promotion rules exist once. Attributes, events,
links and resource are kept as JSON text (lossless for every OTel value type); the
token arrays are stored only in their typed columns, never twice.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import orjson
import pyarrow as pa

from tracerl.schemas import attributes as A
from tracerl.schemas.tokens import TokenEncodingError, decode, decode_array
from tracerl.schemas.versioned import versioned_schema

SPANS_SCHEMA_VERSION = 1

SPANS_SCHEMA = versioned_schema(
    "spans",
    SPANS_SCHEMA_VERSION,
    [
        pa.field("trace_id", pa.string(), nullable=False),
        pa.field("span_id", pa.string(), nullable=False),
        pa.field("parent_span_id", pa.string()),
        pa.field("name", pa.string(), nullable=False),
        pa.field("kind", pa.string()),
        pa.field("start_time_unix_nano", pa.int64(), nullable=False),
        pa.field("end_time_unix_nano", pa.int64(), nullable=False),
        pa.field("status_code", pa.string()),  # UNSET | OK | ERROR
        pa.field("status_message", pa.string()),
        pa.field("service_name", pa.string()),
        pa.field("scope_name", pa.string()),
        pa.field("scope_version", pa.string()),
        # promoted hot fields
        pa.field("episode_id", pa.string()),  # null: the pipeline falls back to trace_id
        pa.field("task_id", pa.string()),
        pa.field("split", pa.string()),
        pa.field("agent_name", pa.string()),
        pa.field("policy_version", pa.int64()),
        pa.field("response_id", pa.string()),
        pa.field("request_model", pa.string()),
        pa.field("response_model", pa.string()),
        pa.field("prompt_token_ids", pa.list_(pa.int32())),
        pa.field("completion_token_ids", pa.list_(pa.int32())),
        pa.field("completion_logprobs", pa.list_(pa.float32())),
        pa.field("reward_value", pa.float64()),
        pa.field("reward_name", pa.string()),
        # lossless remainder, JSON text
        pa.field("attributes", pa.string()),
        pa.field("events", pa.string()),
        pa.field("links", pa.string()),
        pa.field("resource", pa.string()),
    ],
)


# Dictionary-encode in Parquet only the columns whose values repeat within a file (names, kinds,
# models, trace/episode/task ids, resource JSON). For unique values (span ids, times, token ids,
# log-probs, attribute JSON) building dictionaries took ~40 % of the Parquet writer's CPU for files
# ~5 % smaller (benchmarks/collector_throughput.py workload: 6.7 -> 4.1 us per span, 301 -> 315 B).
# Both span writers (the collector and the in-process exporter) pass this as ``use_dictionary``.
_UNIQUE_SPAN_COLUMNS = frozenset({
    "span_id", "parent_span_id", "start_time_unix_nano", "end_time_unix_nano", "response_id", "reward_value",
    "prompt_token_ids", "completion_token_ids", "completion_logprobs", "attributes", "events", "links",
})
SPANS_DICTIONARY_COLUMNS: tuple[str, ...] = tuple(c for c in SPANS_SCHEMA.names if c not in _UNIQUE_SPAN_COLUMNS)

def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        return {"bytes_b64": base64.b64encode(value).decode()}
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def _json_default(value: Any) -> Any:
    # Called by json.dumps only for what it cannot encode itself: bytes and non-dict
    # mappings. Same output as encoding _jsonable(value), without walking every value
    # in Python (this runs for every span the collector receives).
    if isinstance(value, (bytes, Mapping)):
        return _jsonable(value)
    raise TypeError(f"{type(value).__name__} is not an OTel attribute value")


def to_json(value: Any) -> str | None:
    """JSON text of an attribute map (or list of events/links); ``None`` when empty."""
    return json_text(value) if value else None


def json_text(value: Any) -> str:
    """JSON text of any OTel value (bytes as ``{"bytes_b64": ...}``): every JSON column's encoding."""
    if type(value) is dict and all(_orjson_exact(v) for v in value.values()):
        try:
            return orjson.dumps(value).decode()
        except orjson.JSONEncodeError:  # a key that is not a str, an int beyond 64 bits
            pass
    return _ENCODER.encode(value)


# orjson writes exactly the stdlib encoder's text (below) for these values, several times
# faster. It formats some floats differently (1e16 vs 1e+16, 1e-5 vs 1e-05, NaN) and cannot
# take bytes, so a map holding any of those (or nested maps) takes the stdlib path.
_ORJSON_EXACT = frozenset((str, int, bool, type(None)))


def _orjson_exact(value: Any) -> bool:
    kind = type(value)
    if kind in _ORJSON_EXACT:
        return True
    if kind is float:
        return value == 0.0 or 1e-4 <= abs(value) < 1e16  # repr's plain-decimal range; False for NaN
    if kind is tuple or kind is list:  # OTel homogeneous arrays, e.g. finish reasons
        return all(type(item) in _ORJSON_EXACT for item in value)
    return False


# One encoder, made once: json.dumps with these options builds a new one on every call
# (measurable at the collector's rate of several calls per span).
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=True, default=_json_default)


def _int_or_none(value: Any) -> int | None:
    try:
        return None if value is None else int(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: an infinite float
        return None


def _float_or_none(value: Any) -> float | None:
    try:
        return None if value is None else float(value)
    except (TypeError, ValueError):
        return None


def _str_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


# The promotion rules, as data: every writer of span rows (``span_row`` for one span, the
# collector's column builder for a whole OTLP request) reads them from here, so they exist once.

#: (column, attribute keys, cast): the first key present in the attributes gives the value.
PROMOTED_ATTRIBUTES: tuple[tuple[str, tuple[str, ...], Callable[[Any], Any]], ...] = (
    ("episode_id", (A.EPISODE_ID,), _str_or_none),
    ("task_id", (A.TASK_ID,), _str_or_none),
    ("split", (A.SPLIT,), _str_or_none),
    ("agent_name", (A.AGENT_NAME, A.GEN_AI_AGENT_NAME), _str_or_none),  # the tracerl override wins
    ("policy_version", (A.POLICY_VERSION,), _int_or_none),
    ("response_id", (A.GEN_AI_RESPONSE_ID,), _str_or_none),
    ("request_model", (A.GEN_AI_REQUEST_MODEL,), _str_or_none),
    ("response_model", (A.GEN_AI_RESPONSE_MODEL,), _str_or_none),
    ("reward_value", (A.REWARD_VALUE,), _float_or_none),
    ("reward_name", (A.REWARD_NAME,), _str_or_none),
)

#: (column, attribute, element type code of :mod:`tracerl.schemas.tokens`): token arrays are
#: moved out of the attributes into these typed columns, never stored twice.
TOKEN_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("prompt_token_ids", A.PROMPT_TOKEN_IDS, "i4"),
    ("completion_token_ids", A.COMPLETION_TOKEN_IDS, "i4"),
    ("completion_logprobs", A.COMPLETION_LOGPROBS, "f4"),
)


def decode_tokens(attributes: dict[str, Any]) -> None:
    """Replace the token attributes of a span by strictly decoded numpy arrays (in place).

    Both span writers (the in-process exporter and the collector) call this before
    building rows, so a corrupt array is rejected by name and typed arrays go to Arrow
    without a Python int per token.
    """
    for _, key, dtype in TOKEN_COLUMNS:
        if key in attributes:
            try:
                attributes[key] = decode_array(attributes[key], dtype)
            except TokenEncodingError as exc:
                raise TokenEncodingError(f"{key}: {exc}") from exc


def service_name(resource: Mapping[str, Any]) -> str | None:
    """The ``service_name`` column of spans from this resource."""
    return _str_or_none(resource.get(A.SERVICE_NAME))


def promote(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """The promoted columns of a span with these attributes (token arrays excluded)."""
    out = {}
    for column, keys, cast in PROMOTED_ATTRIBUTES:
        for key in keys:
            if key in attributes:
                out[column] = cast(attributes[key])
                break
        else:  # absent (most columns of most spans): every cast maps None to None
            out[column] = None
    return out


def span_row(
    *,
    trace_id: str,
    span_id: str,
    parent_span_id: str | None,
    name: str,
    kind: str | None,
    start_time_unix_nano: int,
    end_time_unix_nano: int,
    status_code: str | None,
    status_message: str | None,
    attributes: Mapping[str, Any],
    events: Sequence[Mapping[str, Any]] = (),
    links: Sequence[Mapping[str, Any]] = (),
    resource: Mapping[str, Any] | None = None,
    scope_name: str | None = None,
    scope_version: str | None = None,
    resource_json: str | None = None,
) -> dict[str, Any]:
    """Build one row of :data:`SPANS_SCHEMA`.

    ``resource_json``, if given, must be ``to_json(resource)``: callers that build many rows
    of one resource (an OTLP request) encode it once instead of once per span.

    Raises :class:`TokenEncodingError` when a token attribute is corrupt, so the caller
    can reject that span with a message instead of storing garbage.
    """
    attrs = dict(attributes)
    tokens = {}
    for column, key, _ in TOKEN_COLUMNS:
        try:
            tokens[column] = decode(attrs.pop(key, None))
        except TokenEncodingError as exc:
            raise TokenEncodingError(f"span {span_id} ({name!r}): {exc}") from exc
    resource = resource or {}
    return {
        "trace_id": trace_id,
        "span_id": span_id,
        "parent_span_id": parent_span_id or None,
        "name": name,
        "kind": kind,
        "start_time_unix_nano": int(start_time_unix_nano),
        "end_time_unix_nano": int(end_time_unix_nano),
        "status_code": status_code,
        "status_message": status_message or None,
        "service_name": service_name(resource),
        "scope_name": scope_name,
        "scope_version": scope_version,
        **promote(attrs),
        **tokens,
        "attributes": to_json(attrs),
        "events": to_json(list(events)),
        "links": to_json(list(links)),
        "resource": resource_json if resource_json is not None else to_json(resource),
    }


def spans_table(rows: Iterable[Mapping[str, Any]]) -> pa.Table:
    rows = list(rows)
    # column by column: about 2.5x faster than Table.from_pylist on span rows
    return pa.Table.from_pydict({name: [row.get(name) for row in rows] for name in SPANS_SCHEMA.names}, schema=SPANS_SCHEMA)
