"""The C wire decoder (``tracerl.collector._otlp_wire``) reads exactly what protobuf reads.

``decode_trace_request(body)`` must return the same values as ``otlp.trace_records`` on the
parsed message (compared by ``repr``: exact for strings, floats, NaN, bytes and bool-vs-int),
or raise ``ValueError`` for what it leaves to protobuf; either way the collector's table is
the row path's. It parses untrusted bytes, so mutated bodies must never crash the process.
The extension is imported directly: CI builds it (gcc), a missing build fails here.
"""

from __future__ import annotations

import math
import random
import struct

import pytest
from google.protobuf.message import DecodeError
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue, KeyValueList

from tracerl.collector import _otlp_wire, columns, otlp
from tracerl.collector.columns import trace_table
from tracerl.collector.service import TRACES
from tracerl.schemas import attributes as A
from tracerl.schemas.spans import PROMOTED_ATTRIBUTES, TOKEN_COLUMNS, promote
from tracerl.schemas.tokens import decode_array, pack_floats, pack_ids
from tracerl_testing.loadgen import encode_batches, make_spans
from tracerl_testing.otlp_requests import random_request



def decode(body: bytes) -> tuple:
    return _otlp_wire.decode_trace_request(body, columns.PACKED_TOKENS)


def _assert_same_records(fast: tuple, reference: tuple) -> int:
    """The decoder's records equal protobuf's, but for packed token attributes it unpacked: those
    are absent from its attributes and their bytes equal what ``decode_tokens`` makes of them;
    and it lists for checking only, but every, span the collector's rules could change.
    Returns how many token attributes it unpacked."""
    n = len(otlp.SPAN_RECORD_COLUMNS)
    (resources, scopes, spans, check), (ref_resources, ref_scopes, ref_spans, ref_check) = fast, reference
    assert repr((resources, scopes, spans[:10], spans[11:n])) == repr((ref_resources, ref_scopes, ref_spans[:10], ref_spans[11:n]))
    assert len(spans) == len(ref_spans) and all(v is None for column in ref_spans[n:] for v in column)
    assert ref_check == list(range(len(ref_spans[0])))  # protobuf's reader leaves every span to the rules
    unpacked = 0
    for attributes, ref_attributes, *tokens in zip(spans[10], ref_spans[10], *spans[n:]):
        ref_attributes = dict(ref_attributes)
        for (_, key, dtype), raw in zip(TOKEN_COLUMNS, tokens):
            if raw is not None:
                assert key not in attributes
                assert decode_array(ref_attributes.pop(key), dtype).tobytes() == raw
                unpacked += 1
        assert repr(_by_position(attributes)) == repr(_by_position(ref_attributes))
    assert check == sorted(set(check))
    token_keys = {key for _, key, _ in TOKEN_COLUMNS}
    for i, ids in enumerate(zip(spans[1], spans[2], spans[3])):
        try:
            unchanged = otlp.hex_ids(*(bytes.fromhex(h or "") for h in ids)) == ids
        except ValueError:
            unchanged = False
        assert (i in check) == (not unchanged or bool(token_keys & spans[10][i].keys()))
    return unpacked


def _by_position(attributes: dict) -> tuple[list, list]:
    """Token attributes leave the attributes for their own columns: their position does not matter."""
    keys = {key for _, key, _ in TOKEN_COLUMNS}
    return [item for item in attributes.items() if item[0] not in keys], sorted(
        (key, repr(value)) for key, value in attributes.items() if key in keys)


def _reference_table(request: ExportTraceServiceRequest) -> tuple[str, int, str]:
    reference = otlp.trace_rows(request)
    return repr(TRACES.table.table(reference).to_pylist()), reference.rejected, reference.message


def _assert_same(body: bytes) -> int:
    """The decoder equals protobuf on ``body`` (a valid request), and so does the stored table."""
    request = ExportTraceServiceRequest.FromString(body)
    unpacked = _assert_same_records(decode(body), otlp.trace_records(request))
    _assert_same_table(request, body)
    return unpacked


def _assert_same_table(request: ExportTraceServiceRequest, body: bytes) -> None:
    table, converted = TRACES.table.build(request, body)  # what the collector runs
    assert (repr(table.to_pylist()), converted.rejected, converted.message) == _reference_table(request)


# --- a tiny protobuf wire writer, for what protobuf's own encoder never writes ----------------

def varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def field(number: int, wire_type: int, payload: bytes) -> bytes:
    """One field: ``payload`` is the varint, the fixed bytes, or (wire type 2) the content."""
    if wire_type == 2:
        payload = varint(len(payload)) + payload
    return varint(number << 3 | wire_type) + payload


def request_with_span(span: bytes, *, resource: bytes = b"", scope: bytes = b"") -> bytes:
    """An ExportTraceServiceRequest holding one span given as raw Span bytes."""
    scope_spans = (field(1, 2, scope) if scope else b"") + field(2, 2, span)
    resource_spans = (field(1, 2, resource) if resource else b"") + field(2, 2, scope_spans)
    return field(1, 2, resource_spans)


IDS = field(1, 2, b"\x01" * 16) + field(2, 2, b"\x02" * 8)


def attribute(key: bytes, any_value: bytes | None) -> bytes:
    """Span field 9: a KeyValue with the given raw AnyValue bytes (None: no value field)."""
    return field(9, 2, field(1, 2, key) + (b"" if any_value is None else field(2, 2, any_value)))


# --- what protobuf's encoder writes ------------------------------------------------------------

@pytest.mark.parametrize("seed", range(60))
def test_random_requests(seed: int) -> None:
    _assert_same(random_request(seed).SerializeToString())


@pytest.mark.parametrize("packed", [True, False])
def test_sdk_spans(packed: bool) -> None:
    bodies = encode_batches(make_spans(300, packed=packed, llm_every=3, prompt_tokens=40, completion_tokens=7), 128)
    unpacked = sum(_assert_same(body) for body in bodies)
    assert unpacked == 3 * 100  # every token attribute, packed or a plain array, by the decoder


def test_edge_values() -> None:
    request = ExportTraceServiceRequest()
    group = request.resource_spans.add()
    group.resource.attributes.add(key="service.name", value=AnyValue(string_value="svc ✓"))
    spans = group.scope_spans.add().spans
    span = spans.add(trace_id=b"\x01" * 16, span_id=b"\x02" * 8, name="", kind=-3,
                     start_time_unix_nano=2**64 - 1, end_time_unix_nano=2**63)
    span.status.code = 2**31 - 1
    nested = AnyValue(array_value=ArrayValue(values=[AnyValue(kvlist_value=KeyValueList(values=[
        KeyValue(key="", value=AnyValue()), KeyValue(key="a", value=AnyValue(array_value=ArrayValue()))]))]))
    for key, value in [
        ("nan", AnyValue(double_value=math.nan)), ("inf", AnyValue(double_value=-math.inf)),
        ("zero", AnyValue(double_value=-0.0)), ("min", AnyValue(int_value=-(2**63))), ("empty", AnyValue()),
        ("dup", AnyValue(int_value=1)), ("ünï ✓", AnyValue(string_value="\x00\U0001f600" + "x" * 40)),
        ("dup", AnyValue(bool_value=True)), ("nested", nested), ("bytes", AnyValue(bytes_value=b"\xff\x00")),
        ("", AnyValue(string_value="")), ("kv", AnyValue(kvlist_value=KeyValueList())),
    ]:
        span.attributes.add(key=key, value=value)
    span.attributes.add(key="no value")
    body = request.SerializeToString()
    _assert_same(body)
    row = [column[0] for column in decode(body)[2]]
    assert row[5:9] == [-3, 2**64 - 1, 2**63, 2**31 - 1]
    assert list(row[10]) == ["nan", "inf", "zero", "min", "empty", "dup", "ünï ✓", "nested", "bytes", "", "kv", "no value"]
    assert row[10]["dup"] is True and row[10]["empty"] is None and row[10]["no value"] is None
    assert TRACES.table.build(request, body)[1].rejected == 1  # the uint64 times: the row path rejects the span


def test_many_distinct_keys_and_values() -> None:
    """Far more distinct short strings than the decoder's string cache holds (collisions, eviction)."""
    request = ExportTraceServiceRequest()
    spans = request.resource_spans.add().scope_spans.add().spans
    rng = random.Random(7)
    for i in range(64):
        span = spans.add(trace_id=rng.randbytes(16), span_id=rng.randbytes(8), name=f"s{i % 5}")
        for j in range(80):
            key = "".join(rng.choice("abcdefgh") for _ in range(rng.randrange(1, 6)))
            span.attributes.add(key=key, value=AnyValue(string_value=f"{i * j % 37}"))
    _assert_same(request.SerializeToString())


@pytest.mark.parametrize("seed", range(20))
def test_promote_columns_is_promote_of_every_span(seed: int) -> None:
    _, _, spans, _ = otlp.trace_records(random_request(seed))
    attributes = spans[10]
    columns_ = _otlp_wire.promote_columns(attributes, PROMOTED_ATTRIBUTES)
    expected = [list(column) for column in zip(*(promote(a).values() for a in attributes))] or [[]] * len(columns_)
    assert repr(columns_) == repr(expected)


# --- packed token arrays: unpacked by the decoder exactly as decode_tokens does, or left to it ---

TOKEN_KEYS = [A.PROMPT_TOKEN_IDS, A.COMPLETION_TOKEN_IDS, A.COMPLETION_LOGPROBS]
payloads = st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/", max_size=24).map(
    lambda text: text + "=" * (-len(text) % 4))  # valid base64 quanta; the element count may not fit
packed_strings = st.one_of(
    st.lists(st.integers(-(2**31), 2**31 - 1), max_size=9).map(pack_ids),
    st.lists(st.floats(width=32), max_size=9).map(pack_floats),  # NaN, inf, -0.0 too
    st.tuples(st.sampled_from(["tokpack:i4:", "tokpack:f4:", "tokpack:x9:", "tokpack:", "tokpack:i4", "", "Tokpack:i4:"]),
              st.one_of(payloads, st.text(alphabet="AB=:-_ \né", max_size=12))).map("".join),
)


@settings(max_examples=300, deadline=None)
@given(values=st.lists(st.tuples(st.sampled_from(TOKEN_KEYS), packed_strings), min_size=1, max_size=5),
       plain=st.booleans())
def test_packed_token_attributes(values: list[tuple[str, str]], plain: bool) -> None:
    """Valid and invalid packed strings, of the right and the wrong element type, repeated keys
    (the last wins, packed or not), next to plain arrays: same table, same rejections."""
    request = ExportTraceServiceRequest()
    span = request.resource_spans.add().scope_spans.add().spans.add(trace_id=b"\x01" * 16, span_id=b"\x02" * 8)
    span.attributes.add(key="before", value=AnyValue(int_value=1))
    for key, text in values:
        span.attributes.add(key=key, value=AnyValue(string_value=text))
        if plain:
            span.attributes.add(key=key, value=AnyValue(array_value=ArrayValue(values=[AnyValue(int_value=7)])))
    span.attributes.add(key="after", value=AnyValue(string_value="x"))
    _assert_same(request.SerializeToString())


def test_packed_token_attributes_are_unpacked() -> None:
    ids, logprobs = [0, -1, 2**31 - 1, 50_000], [-0.5, float("nan"), -0.0]
    request = ExportTraceServiceRequest()
    span = request.resource_spans.add().scope_spans.add().spans.add(trace_id=b"\x01" * 16, span_id=b"\x02" * 8)
    for key, text in [(A.PROMPT_TOKEN_IDS, "tokpack:i4:AAAA"), (A.PROMPT_TOKEN_IDS, pack_ids(ids)),  # the last wins
                      (A.COMPLETION_LOGPROBS, pack_floats(logprobs)), (A.COMPLETION_TOKEN_IDS, pack_floats([1.0]))]:
        span.attributes.add(key=key, value=AnyValue(string_value=text))
    body = request.SerializeToString()
    assert _assert_same(body) == 2
    *_, prompt, completion, logprob_bytes = (column[0] for column in decode(body)[2])
    assert prompt == struct.pack("<4i", *ids) and completion is None and logprob_bytes == struct.pack("<3f", *logprobs)
    table, converted = TRACES.table.build(request, body)  # the completion ids are floats: rejected, like the row path
    assert table.num_rows == 0 and converted.rejected == 1 and A.COMPLETION_TOKEN_IDS in converted.message


# --- token attributes as plain OTel arrays (every producer but tracerl's capture) ---------------

# the items of such arrays: the clean kinds (int32 ids, float32-range log-probs) and every kind
# decode_array must see for itself (ints past int32, floats past float32, bools, strings, nesting)
array_items = st.one_of(
    st.integers(-(2**31), 2**31 - 1).map(lambda v: AnyValue(int_value=v)),
    st.integers(-(2**63), 2**63 - 1).map(lambda v: AnyValue(int_value=v)),
    st.floats(width=32).map(lambda v: AnyValue(double_value=v)),
    st.floats().map(lambda v: AnyValue(double_value=v)),
    st.sampled_from([AnyValue(bool_value=True), AnyValue(string_value="7"), AnyValue(),
                     AnyValue(array_value=ArrayValue(values=[AnyValue(int_value=1)]))]),
)
plain_arrays = st.one_of(
    st.lists(st.integers(-(2**31), 2**31 - 1), max_size=12).map(lambda vs: [AnyValue(int_value=v) for v in vs]),
    st.lists(st.floats(width=32), max_size=12).map(lambda vs: [AnyValue(double_value=v) for v in vs]),
    st.lists(array_items, max_size=6),
)


@settings(max_examples=400, deadline=None)
@given(values=st.lists(st.tuples(st.sampled_from(TOKEN_KEYS + ["other.ids"]), plain_arrays), min_size=1, max_size=5))
def test_plain_token_arrays(values: list[tuple[str, list[AnyValue]]]) -> None:
    """Plain arrays of int / double items, on token keys and another key, clean and not, repeated
    keys: the decoder turns exactly those decode_array stores as they are into its bytes; the
    rest (and every array on another key) stay lists, and the table and rejections are the row path's."""
    request = ExportTraceServiceRequest()
    span = request.resource_spans.add().scope_spans.add().spans.add(trace_id=b"\x01" * 16, span_id=b"\x02" * 8)
    for key, items in values:
        span.attributes.add(key=key, value=AnyValue(array_value=ArrayValue(values=items)))
    _assert_same(request.SerializeToString())


def test_plain_token_arrays_become_bytes_and_other_arrays_stay_lists() -> None:
    ids, logprobs = [0, -1, 2**31 - 1, 50_000], [-0.5, float("nan"), -0.0, float("-inf")]
    request = ExportTraceServiceRequest()
    span = request.resource_spans.add().scope_spans.add().spans.add(trace_id=b"\x01" * 16, span_id=b"\x02" * 8)
    for key, items in [(A.PROMPT_TOKEN_IDS, [AnyValue(int_value=v) for v in ids]),
                       (A.COMPLETION_LOGPROBS, [AnyValue(double_value=v) for v in logprobs]),
                       (A.COMPLETION_TOKEN_IDS, [AnyValue(int_value=2**31)]),  # past int32: decode_array rejects it
                       ("app.ids", [AnyValue(int_value=v) for v in ids])]:
        span.attributes.add(key=key, value=AnyValue(array_value=ArrayValue(values=items)))
    body = request.SerializeToString()
    assert _assert_same(body) == 2
    (*_, attributes, _events, _links, prompt, completion, logprob_bytes), _check = (
        [column[0] for column in decode(body)[2]], decode(body)[3])
    assert prompt == struct.pack("<4i", *ids) and logprob_bytes == struct.pack("<4f", *logprobs) and completion is None
    assert attributes == {A.COMPLETION_TOKEN_IDS: [2**31], "app.ids": ids}
    table, converted = TRACES.table.build(request, body)
    assert table.num_rows == 0 and converted.rejected == 1 and "int32" in converted.message


# --- future fields: skipped as protobuf skips them, except inside AnyValue --------------------

UNKNOWN = [field(1000, 0, varint(2**64 - 1)), field(1001, 2, b"later"), field(1002, 1, b"\x00" * 8),
           field(1003, 5, b"\x01\x02\x03\x04"), field(17, 2, b"")]


def _with_unknown_fields(message, rng: random.Random) -> bytes:
    """``message`` re-encoded with unknown fields before, between and after its fields (not in AnyValues)."""
    if isinstance(message, AnyValue):
        return message.SerializeToString()
    parts = [rng.choice(UNKNOWN)]
    for descriptor, value in message.ListFields():
        repeated = descriptor.label == descriptor.LABEL_REPEATED
        if descriptor.message_type is None:
            single = type(message)()
            if repeated:
                getattr(single, descriptor.name).extend(value)
            else:
                setattr(single, descriptor.name, value)
            parts.append(single.SerializeToString())
        else:
            for item in value if repeated else [value]:
                parts.append(field(descriptor.number, 2, _with_unknown_fields(item, rng)))
        parts.append(rng.choice(UNKNOWN))
    return b"".join(parts)


@pytest.mark.parametrize("seed", range(20))
def test_unknown_fields_are_skipped(seed: int) -> None:
    request = random_request(seed)
    body = _with_unknown_fields(request, random.Random(seed))
    parsed = ExportTraceServiceRequest.FromString(body)
    assert parsed != request  # protobuf keeps the unknown fields ...
    parsed.DiscardUnknownFields()
    assert parsed == request  # ... and reads the rest as before
    _assert_same(body)


# --- what the decoder leaves to protobuf: ValueError, and the collector's table is still right ---

FALLBACKS = {
    "two statuses (protobuf merges them)": IDS + field(15, 2, field(2, 2, b"a")) + field(15, 2, field(3, 0, b"\x02")),
    "AnyValue with two arrays (merged)": IDS + attribute(b"k", field(5, 2, field(1, 2, field(3, 0, b"\x01")))
                                                       + field(5, 2, field(1, 2, field(3, 0, b"\x02")))),
    "KeyValue with two values (merged)": IDS + field(9, 2, field(1, 2, b"k") + field(2, 2, field(3, 0, b"\x01"))
                                                     + field(2, 2, field(7, 2, b"x"))),
    "AnyValue string_value_strindex": IDS + attribute(b"k", field(8, 0, b"\x05")),
    "AnyValue field from the future": IDS + attribute(b"k", field(3, 0, b"\x07") + field(99, 0, b"\x01")),
    "name with the wrong wire type (protobuf: unknown)": IDS + field(5, 0, b"\x01"),
    "int_value with the wrong wire type": IDS + attribute(b"k", field(3, 5, b"\x01\x00\x00\x00")),
    "group in an unknown field": IDS + varint(50 << 3 | 3) + varint(50 << 3 | 4),
}


@pytest.mark.parametrize("case", FALLBACKS)
def test_declined_bodies_fall_back_to_protobuf(case: str) -> None:
    body = request_with_span(FALLBACKS[case])
    request = ExportTraceServiceRequest.FromString(body)  # valid protobuf, all of them
    with pytest.raises(ValueError):
        decode(body)
    assert repr(columns.records(request, body)) == repr(otlp.trace_records(request))  # protobuf's reading
    _assert_same_table(request, body)


def test_values_protobuf_reads_its_own_way() -> None:
    """Repeated scalars (last wins), oneof switches, non-canonical bools and over-long enums."""
    span = (IDS + field(5, 2, b"first") + field(5, 2, b"second") + field(6, 0, varint(-1)) + field(6, 0, varint(2**40 + 3))
            + field(15, 2, field(3, 0, varint(2**33 + 2)) + field(2, 2, b"m") + field(2, 2, b""))
            + attribute(b"switch", field(1, 2, b"text") + field(3, 0, varint(-5)))
            + attribute(b"back", field(5, 2, b"") + field(1, 2, b"text"))
            + attribute(b"bool", field(2, 0, varint(256)))
            + attribute(b"dup", field(4, 1, struct.pack("<d", 1.5))) + attribute(b"other", None)
            + attribute(b"dup", field(7, 2, b"")))
    body = request_with_span(span, resource=field(1, 2, field(1, 2, b"service.name") + field(2, 2, field(1, 2, b"r"))),
                             scope=field(1, 2, b"") + field(2, 2, b"v2") + field(3, 2, field(1, 2, b"not stored")))
    _assert_same(body)
    resources, scopes, spans, check = decode(body)
    row = [column[0] for column in spans]
    assert resources == [{"service.name": "r"}] and scopes == [(0, None, "v2")] and check == []
    assert row[4:10] == ["second", 3, 0, 0, 2, None]
    assert row[10] == {"switch": -5, "back": "text", "bool": True, "dup": b"", "other": None}


def test_nesting_deeper_than_the_decoder_goes_falls_back() -> None:
    value = field(3, 0, b"\x01")
    for _ in range(40):  # 80 levels of AnyValue/ArrayValue: protobuf parses it (limit 100), the decoder declines
        value = field(5, 2, field(1, 2, value))
    body = request_with_span(IDS + attribute(b"deep", value))
    request = ExportTraceServiceRequest.FromString(body)
    with pytest.raises(ValueError, match="nested too deeply"):
        decode(body)
    _assert_same_table(request, body)


@pytest.mark.parametrize("body", [
    field(1, 2, b"\x12\x05ab"),  # a length past the end of its message
    b"\x0a\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",  # an 11-byte varint
    b"\x0a",  # truncated
    b"\x00\x00",  # field number 0
    request_with_span(IDS + field(5, 2, b"\xff\xfe")),  # invalid UTF-8
    request_with_span(IDS + attribute(b"\xc3", None)),  # invalid UTF-8 in a key
    request_with_span(IDS + field(7, 1, b"\x01\x02")),  # truncated fixed64
], ids=["length", "varint", "truncated", "field 0", "utf-8", "utf-8 key", "fixed64"])
def test_malformed_bodies_raise_value_error(body: bytes) -> None:
    with pytest.raises(DecodeError):
        ExportTraceServiceRequest.FromString(body)
    with pytest.raises(ValueError):
        decode(body)


VALID = encode_batches(make_spans(6, llm_every=2, seed=3, prompt_tokens=5, completion_tokens=3))[0]
EDGY = _with_unknown_fields(ExportTraceServiceRequest.FromString(VALID), random.Random(1))


@settings(max_examples=400, deadline=None)
@given(base=st.sampled_from([VALID, EDGY]), cut=st.integers(0, len(EDGY)),
       flips=st.lists(st.tuples(st.integers(0, len(EDGY) - 1), st.integers(0, 255)), max_size=6))
def test_mutated_bodies_never_crash_and_never_disagree(base: bytes, cut: int, flips: list[tuple[int, int]]) -> None:
    body = bytearray(base[:cut])
    for index, value in flips:
        if index < len(body):
            body[index] = value
    body = bytes(body)
    try:
        decoded = decode(body)
    except ValueError:
        decoded = None
    try:
        request = ExportTraceServiceRequest.FromString(body)
    except DecodeError:
        return  # the collector answers 400 before decoding; the decoder only had to survive it
    if decoded is not None:
        _assert_same_records(decoded, otlp.trace_records(request))
    _assert_same_table(request, body)


def test_the_collector_reads_the_bytes_with_the_decoder() -> None:
    assert columns.CONVERTER.startswith("OTLP wire decoder")
    body = encode_batches(make_spans(4))[0]
    # an empty message with the bytes of 4 spans: only a reader of the bytes finds them
    assert trace_table(ExportTraceServiceRequest(), body)[0].num_rows == 4
