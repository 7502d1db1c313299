"""OTLP/gRPC with the real OTel gRPC exporters: traces and logs, auth, overload replies."""

from __future__ import annotations

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace.export import SpanExportResult

from tracerl.schemas import attributes as A
from tracerl.schemas.tokens import decode
from tracerl_testing.loadgen import encode_batches, make_spans
from tracerl_testing.tables import read_table


def test_grpc_exporter_spans_arrive_losslessly(start_collector, data_dir):
    server = start_collector()
    spans = make_spans(30, packed=False, llm_every=3, seed=3)
    exporter = OTLPSpanExporter(endpoint=f"127.0.0.1:{server.grpc_port}", insecure=True)
    assert exporter.export(spans) is SpanExportResult.SUCCESS
    exporter.shutdown()
    server.collector.flush()
    rows = {r["span_id"]: r for r in read_table(data_dir).to_pylist()}
    assert len(rows) == 30
    for span in spans:
        row = rows[format(span.context.span_id, "016x")]
        assert row["prompt_token_ids"] == decode(span.attributes.get(A.PROMPT_TOKEN_IDS))


def test_grpc_partial_success_names_the_rejected_span(start_collector, data_dir):
    server = start_collector()
    request = ExportTraceServiceRequest.FromString(encode_batches(make_spans(4, llm_every=1, seed=4))[0])
    bad = request.resource_spans[0].scope_spans[0].spans[2]
    for kv in bad.attributes:
        if kv.key == A.COMPLETION_TOKEN_IDS:
            kv.value.string_value = "tokpack:q9:AAAA"  # unknown element type
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
        reply = trace_service_pb2_grpc.TraceServiceStub(channel).Export(request)
    assert reply.partial_success.rejected_spans == 1
    assert bad.span_id.hex() in reply.partial_success.error_message
    server.collector.flush()
    assert read_table(data_dir).num_rows == 3


def test_grpc_requires_the_bearer_token_when_configured(start_collector):
    server = start_collector(auth_token="s3cret")
    target = f"127.0.0.1:{server.grpc_port}"
    spans = make_spans(2)
    assert OTLPSpanExporter(endpoint=target, insecure=True, timeout=5).export(spans) is SpanExportResult.FAILURE
    ok = OTLPSpanExporter(endpoint=target, insecure=True, headers={"authorization": "Bearer s3cret"})
    assert ok.export(spans) is SpanExportResult.SUCCESS


def test_grpc_overload_is_resource_exhausted_with_retry_info(start_collector):
    server = start_collector(max_inflight_bytes=1)  # any second concurrent request is too much
    server.collector.admission.acquire(1)  # as if one request were in progress
    request = ExportTraceServiceRequest.FromString(encode_batches(make_spans(2))[0])
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
        with pytest.raises(grpc.RpcError) as caught:
            trace_service_pb2_grpc.TraceServiceStub(channel).Export(request)
    error = caught.value
    assert error.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    details = dict(error.trailing_metadata())["grpc-status-details-bin"]
    retry = error_details_pb2.RetryInfo()
    assert status_pb2.Status.FromString(details).details[0].Unpack(retry)
    assert retry.retry_delay.seconds >= 1
    server.collector.admission.release(1)


def test_grpc_bad_protobuf_is_invalid_argument_naming_the_problem(start_collector):
    server = start_collector()
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
        export = channel.unary_unary("/opentelemetry.proto.collector.trace.v1.TraceService/Export")
        with pytest.raises(grpc.RpcError) as caught:
            export(b"\x0a\xff\x01 not protobuf", timeout=10)
    assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "not a valid ExportTraceServiceRequest" in caught.value.details()
