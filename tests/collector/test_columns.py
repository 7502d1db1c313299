"""The column-wise fast path stores exactly what the row path (``span_row``) stores.

``trace_table`` is what the collector runs on every request; ``spans_table(trace_rows(..))``
is the reference built from ``span_row``, the single definition of the promotion rules.
Both must agree value for value, and reject the same spans with the same messages.
"""

from __future__ import annotations

import math
import random

import pyarrow as pa
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue, KeyValueList
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from tracerl.collector import otlp
from tracerl.collector.columns import trace_table
from tracerl.collector.loadgen import encode_batches, make_spans
from tracerl.collector.service import TRACES
from tracerl.schemas import attributes as A
from tracerl.schemas.spans import SPANS_SCHEMA, spans_table
from tracerl.schemas.tokens import pack_floats, pack_ids


def _assert_same(request: ExportTraceServiceRequest) -> pa.Table:
    fast, fast_converted = trace_table(request)
    reference = otlp.trace_rows(request)
    expected = spans_table(reference.rows)
    assert fast.schema.equals(SPANS_SCHEMA, check_metadata=True)
    # repr: exact for every string and float, and NaN (a possible reward_value) equals itself
    assert repr(fast.to_pylist()) == repr(expected.to_pylist())
    assert (fast_converted.rejected, fast_converted.message) == (reference.rejected, reference.message)
    return fast


def _value(rng: random.Random, depth: int = 0) -> AnyValue:
    kind = rng.choice(["s", "i", "d", "b", "bytes", "empty", "array", "kvlist"] if depth < 3 else ["s", "i", "d"])
    if kind == "s":
        return AnyValue(string_value=rng.choice(["", "x", "héllo ✓", 'quote " and \\', "\x00ctl", "long" * 50]))
    if kind == "i":
        return AnyValue(int_value=rng.choice([0, -1, 2**63 - 1, -(2**63), rng.randrange(-1000, 1000)]))
    if kind == "d":
        return AnyValue(double_value=rng.choice([0.0, -0.0, 1e16, 1.5e-300, math.inf, -math.inf, math.nan, rng.random()]))
    if kind == "b":
        return AnyValue(bool_value=rng.random() < 0.5)
    if kind == "bytes":
        return AnyValue(bytes_value=bytes(rng.randrange(256) for _ in range(rng.randrange(5))))
    if kind == "empty":
        return AnyValue()
    if kind == "array":
        return AnyValue(array_value=ArrayValue(values=[_value(rng, depth + 1) for _ in range(rng.randrange(4))]))
    return AnyValue(kvlist_value=KeyValueList(values=_attributes(rng, depth + 1, 3)))


def _attributes(rng: random.Random, depth: int, most: int) -> list[KeyValue]:
    keys = ["k", "é", "tool.input", A.EPISODE_ID, A.AGENT_NAME, A.GEN_AI_AGENT_NAME, A.POLICY_VERSION, A.REWARD_VALUE]
    return [KeyValue(key=rng.choice(keys), value=_value(rng, depth)) for _ in range(rng.randrange(most + 1))]


def _token_attribute(rng: random.Random) -> KeyValue:
    """A token attribute, valid (packed or plain, empty too) or corrupt."""
    key = rng.choice([A.PROMPT_TOKEN_IDS, A.COMPLETION_TOKEN_IDS, A.COMPLETION_LOGPROBS])
    floats = key == A.COMPLETION_LOGPROBS
    n = rng.choice([0, 1, 7])
    form = rng.choice(["packed", "plain", "corrupt", "wrong type"])
    if form == "packed":
        value = AnyValue(string_value=pack_floats([-rng.random() for _ in range(n)]) if floats else pack_ids(range(n)))
    elif form == "plain":
        items = [AnyValue(double_value=-rng.random()) if floats else AnyValue(int_value=rng.randrange(2**31)) for _ in range(n)]
        value = AnyValue(array_value=ArrayValue(values=items))
    elif form == "corrupt":
        value = AnyValue(string_value=rng.choice(["tokpack:i4:AAA", "tokpack:x9:AAAA", "nope"]))
    else:
        value = AnyValue(string_value=pack_ids([1]) if floats else pack_floats([0.5]))
    return KeyValue(key=key, value=value)


def _random_request(seed: int) -> ExportTraceServiceRequest:
    rng = random.Random(seed)
    request = ExportTraceServiceRequest()
    for r in range(rng.randrange(1, 4)):
        group = request.resource_spans.add()
        if rng.random() < 0.8:
            group.resource.attributes.add(key="service.name", value=AnyValue(string_value=f"svc-{r}"))
        group.resource.attributes.extend(_attributes(rng, 1, 2))
        for s in range(rng.randrange(0, 3)):
            scoped = group.scope_spans.add()
            if rng.random() < 0.7:
                scoped.scope.name, scoped.scope.version = f"scope-{s}", rng.choice(["", "1.0"])
            for i in range(rng.randrange(0, 12)):
                span = scoped.spans.add(
                    trace_id=rng.choice([rng.randbytes(16)] * 9 + [b"\x00" * 16, b"\x01"]),
                    span_id=rng.choice([rng.randbytes(8)] * 9 + [b"", b"\x02" * 3]),
                    parent_span_id=rng.choice([b"", rng.randbytes(8)]),
                    name=rng.choice(["chat m", "execute_tool calc", "", "ünïcode"]),
                    kind=rng.choice([0, 1, 2, 3, 4, 5, 17]),
                    start_time_unix_nano=rng.randrange(2**62),
                    end_time_unix_nano=rng.randrange(2**62),
                )
                span.status.code = rng.choice([0, 1, 2, 9])
                span.status.message = rng.choice(["", "boom"])
                span.attributes.extend(_attributes(rng, 0, 6))
                if rng.random() < 0.4:
                    span.attributes.append(_token_attribute(rng))
                for _ in range(rng.choice([0, 0, 1, 2])):
                    span.events.add(name="gen_ai.choice", time_unix_nano=rng.randrange(2**40)).attributes.extend(
                        _attributes(rng, 1, 3))
                for _ in range(rng.choice([0, 0, 1])):
                    span.links.add(trace_id=rng.randbytes(16), span_id=rng.randbytes(8)).attributes.extend(
                        _attributes(rng, 1, 2))
    return request


@pytest.mark.parametrize("seed", range(40))
def test_random_requests_store_exactly_what_span_row_stores(seed: int) -> None:
    _assert_same(_random_request(seed))


@pytest.mark.parametrize("packed", [True, False])
def test_sdk_spans_with_tokens_store_exactly_what_span_row_stores(packed: bool) -> None:
    body = encode_batches(make_spans(64, packed=packed, llm_every=2, prompt_tokens=20, completion_tokens=5))[0]
    table = _assert_same(ExportTraceServiceRequest.FromString(body))
    assert table.num_rows == 64 and table.column("prompt_token_ids").null_count == 32


def test_promotion_and_rejections_by_name() -> None:
    request = ExportTraceServiceRequest()
    spans = request.resource_spans.add().scope_spans.add().spans
    good = spans.add(trace_id=b"\x01" * 16, span_id=b"\x02" * 8, name="chat m", kind=Span.SPAN_KIND_CLIENT)
    for key, value in [
        (A.GEN_AI_AGENT_NAME, AnyValue(string_value="writer")),
        (A.AGENT_NAME, AnyValue(string_value="rewriter")),
        (A.POLICY_VERSION, AnyValue(string_value="not a number")),
        (A.PROMPT_TOKEN_IDS, AnyValue(string_value=pack_ids([5, 6]))),
    ]:
        good.attributes.add(key=key, value=value)
    bad = spans.add(trace_id=b"\x01" * 16, span_id=b"\x03" * 8, name="broken")
    bad.attributes.add(key=A.COMPLETION_LOGPROBS, value=AnyValue(string_value="tokpack:f4:AAA"))
    table = _assert_same(request)
    row, = table.to_pylist()
    assert row["agent_name"] == "rewriter" and row["policy_version"] is None and row["prompt_token_ids"] == [5, 6]
    _, converted = trace_table(request)
    assert converted.rejected == 1
    assert "span 0303030303030303 ('broken')" in converted.message and A.COMPLETION_LOGPROBS in converted.message


def test_value_the_schema_cannot_hold_falls_back_to_rejecting_that_span_alone() -> None:
    request = ExportTraceServiceRequest()
    spans = request.resource_spans.add().scope_spans.add().spans
    spans.add(trace_id=b"\x01" * 16, span_id=b"\x02" * 8, name="fine", end_time_unix_nano=1)
    spans.add(trace_id=b"\x01" * 16, span_id=b"\x03" * 8, name="late", end_time_unix_nano=2**64 - 1)
    with pytest.raises((pa.ArrowException, OverflowError)):
        trace_table(request)
    table, converted = TRACES.table.build(request)
    assert table.column("name").to_pylist() == ["fine"]
    assert converted.rejected == 1 and "span 0303030303030303" in converted.message
