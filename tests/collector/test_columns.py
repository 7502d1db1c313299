"""The column-wise fast path stores exactly what the row path (``span_row``) stores.

``trace_table`` is what the collector runs on every request; ``spans_table(trace_rows(..))``
is the reference built from ``span_row``, the single definition of the promotion rules.
Both must agree value for value, and reject the same spans with the same messages, whether
the values come from the protobuf objects or from the C wire decoder reading the bytes
(tests/collector/test_otlp_wire.py compares the two sources themselves).
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from tracerl.collector import columns, otlp
from tracerl.collector.columns import trace_table
from tracerl.collector.service import TRACES
from tracerl.schemas import attributes as A
from tracerl.schemas.spans import SPANS_SCHEMA, spans_table
from tracerl.schemas.tokens import pack_ids
from tracerl_testing.loadgen import encode_batches, make_spans
from tracerl_testing.otlp_requests import random_request


def _assert_same(request: ExportTraceServiceRequest) -> pa.Table:
    """Both record sources (protobuf objects; the C wire decoder on the bytes) give the row path's table."""
    reference = otlp.trace_rows(request)
    expected = spans_table(reference.rows)
    body = request.SerializeToString()
    # protobuf objects; the bytes read by the wire decoder; the bytes alone, as the collector
    # converts them (protobuf parses them only where the wire decoder cannot)
    for given, given_body in ((request, None), (request, body), (None, body)):
        fast, fast_converted = trace_table(given, given_body)
        assert fast.schema.equals(SPANS_SCHEMA, check_metadata=True)
        # repr: exact for every string and float, and NaN (a possible reward_value) equals itself
        assert repr(fast.to_pylist()) == repr(expected.to_pylist())
        assert (fast_converted.rejected, fast_converted.message) == (reference.rejected, reference.message)
    return fast


@pytest.mark.parametrize("seed", range(40))
def test_random_requests_store_exactly_what_span_row_stores(seed: int) -> None:
    _assert_same(random_request(seed))


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
    body = request.SerializeToString()
    for given, given_body in ((request, None), (request, body), (None, body)):
        with pytest.raises((pa.ArrowException, OverflowError)):
            trace_table(given, given_body)
        table, converted = TRACES.table.build(given, given_body)
        assert table.column("name").to_pylist() == ["fine"]
        assert converted.rejected == 1 and "span 0303030303030303" in converted.message


def test_a_body_neither_reader_can_parse_is_a_bad_payload() -> None:
    """Given only bytes (the collector's call), what the wire decoder refuses goes to protobuf,
    whose refusal is the client's 400."""
    body = encode_batches(make_spans(4))[0]
    with pytest.raises(otlp.BadPayload, match="not a valid ExportTraceServiceRequest"):
        TRACES.table.build(None, body[:-3])  # cut inside the last span


@pytest.mark.parametrize("seed", range(5))
def test_without_the_c_extension_the_same_table(seed: int, monkeypatch) -> None:
    """A machine without a C compiler installs without ``_otlp_wire``: protobuf objects and
    ``promote`` per span then, the same stored values."""
    monkeypatch.setattr(columns, "HAVE_WIRE_DECODER", False)
    _assert_same(random_request(seed))
