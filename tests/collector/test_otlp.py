"""OTLP -> rows: value mapping and the checks that reject one span instead of a request."""

from __future__ import annotations

import numpy as np
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue, KeyValueList

from tracerl.collector import otlp
from tracerl.schemas import attributes as A
from tracerl.schemas.tokens import pack_floats, pack_ids


def test_any_value_maps_every_otlp_type():
    value = AnyValue(kvlist_value=KeyValueList(values=[
        KeyValue(key="s", value=AnyValue(string_value="x")),
        KeyValue(key="i", value=AnyValue(int_value=-(2**62))),
        KeyValue(key="d", value=AnyValue(double_value=0.25)),
        KeyValue(key="b", value=AnyValue(bool_value=True)),
        KeyValue(key="raw", value=AnyValue(bytes_value=b"\x00\xff")),
        KeyValue(key="list", value=AnyValue(array_value=ArrayValue(values=[AnyValue(int_value=1), AnyValue()]))),
    ]))
    assert otlp.any_value(value) == {"s": "x", "i": -(2**62), "d": 0.25, "b": True, "raw": b"\x00\xff", "list": [1, None]}


def _request(token_attributes: dict[str, AnyValue]) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    spans = request.resource_spans.add().scope_spans.add().spans
    for i, (key, value) in enumerate(token_attributes.items(), start=1):
        span = spans.add(trace_id=b"\x01" * 16, span_id=i.to_bytes(8, "big"), name=f"call {i}")
        span.attributes.add(key=key, value=value)
    spans.add(trace_id=b"\x01" * 16, span_id=b"\xff" * 8, name="fine")
    return request


def _ints(*values: int) -> AnyValue:
    return AnyValue(array_value=ArrayValue(values=[AnyValue(int_value=v) for v in values]))


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        (A.PROMPT_TOKEN_IDS, _ints(1, 2**40), "out of int32 range"),
        (A.PROMPT_TOKEN_IDS, AnyValue(array_value=ArrayValue(values=[AnyValue(double_value=1.5)])), "integers"),
        (A.PROMPT_TOKEN_IDS, AnyValue(array_value=ArrayValue(values=[AnyValue(string_value="1")])), "integers"),
        (A.COMPLETION_TOKEN_IDS, AnyValue(string_value=pack_floats([0.5])), "expected a packed 'i4' array"),
        (A.COMPLETION_LOGPROBS, AnyValue(string_value="tokpack:f4:AAA"), "corrupt packed token array"),
        (A.COMPLETION_LOGPROBS, AnyValue(int_value=3), "expected an array of numbers"),
        (A.COMPLETION_LOGPROBS, AnyValue(array_value=ArrayValue(values=[AnyValue(double_value=-1e300)])),
         "out of float32 range"),
    ],
)
def test_a_bad_token_attribute_rejects_only_its_span(key, value, says):
    converted = otlp.trace_rows(_request({key: value}))
    assert [r["name"] for r in converted.rows] == ["fine"]
    assert converted.rejected == 1
    assert says in converted.message and key in converted.message and "0000000000000001" in converted.message


def test_tokens_decode_to_exact_arrays_either_way():
    rows = otlp.trace_rows(_request({
        A.PROMPT_TOKEN_IDS: _ints(0, 2**31 - 1),
        A.COMPLETION_TOKEN_IDS: AnyValue(string_value=pack_ids([7, 8, 9])),
        A.COMPLETION_LOGPROBS: AnyValue(string_value=pack_floats([-0.5, -1.25])),
    })).rows
    assert rows[0]["prompt_token_ids"].tolist() == [0, 2**31 - 1]
    assert rows[1]["completion_token_ids"].tolist() == [7, 8, 9]
    assert rows[2]["completion_logprobs"].dtype == np.float32 and rows[2]["completion_logprobs"].tolist() == [-0.5, -1.25]


def test_invalid_ids_reject_the_span():
    request = ExportTraceServiceRequest()
    spans = request.resource_spans.add().scope_spans.add().spans
    spans.add(trace_id=b"\x00" * 16, span_id=b"\x01" * 8, name="zero trace id")
    spans.add(trace_id=b"\x01" * 16, span_id=b"\x01" * 3, name="short span id")
    converted = otlp.trace_rows(request)
    assert converted.rows == [] and converted.rejected == 2
    assert "trace_id must be 16 non-zero bytes" in converted.message
    assert "span_id must be 8 non-zero bytes, got 3 bytes" in converted.message


def test_many_rejections_are_summarised():
    request = ExportTraceServiceRequest()
    spans = request.resource_spans.add().scope_spans.add().spans
    for _ in range(12):
        spans.add(name="no ids")
    converted = otlp.trace_rows(request)
    assert converted.rejected == 12 and converted.message.endswith("and 7 more")
