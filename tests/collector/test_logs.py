"""/v1/logs: GenAI events with message content land in logs/, joinable to their LLM call span."""

from __future__ import annotations

import json

import duckdb
import pytest
from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter as GrpcLogExporter
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter as HttpLogExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_genai_events_are_stored_and_join_their_span(start_collector, data_dir, protocol):
    server = start_collector()
    resource = Resource.create({"service.name": "chat-agent"})
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{server.http_url()}/v1/traces")))
    log_exporter = (
        HttpLogExporter(endpoint=f"{server.http_url()}/v1/logs")
        if protocol == "http"
        else GrpcLogExporter(endpoint=f"127.0.0.1:{server.grpc_port}", insecure=True)
    )
    logger_provider = LoggerProvider(resource=resource)
    logger_provider.add_log_record_processor(SimpleLogRecordProcessor(log_exporter))
    logger = logger_provider.get_logger("opentelemetry.instrumentation.openai_v2")

    with tracer_provider.get_tracer("t").start_as_current_span("chat tiny") as span:
        # what opentelemetry-instrumentation-openai-v2 emits with content capture on
        logger.emit(event_name="gen_ai.user.message", body={"content": "What is 6*7?"},
                    attributes={"gen_ai.system": "openai"})
        logger.emit(event_name="gen_ai.choice",
                    body={"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "42"}},
                    attributes={"gen_ai.system": "openai"})
    tracer_provider.shutdown()
    logger_provider.shutdown()
    server.collector.flush()

    rows = duckdb.sql(
        f"""SELECT l.event_name, l.body, s.name, l.service_name
            FROM read_parquet('{data_dir}/logs/**/*.parquet', hive_partitioning=false) l
            JOIN read_parquet('{data_dir}/spans/**/*.parquet', hive_partitioning=false) s
              ON l.trace_id = s.trace_id AND l.span_id = s.span_id
            ORDER BY l.time_unix_nano"""
    ).fetchall()
    assert [(r[0], r[2], r[3]) for r in rows] == [
        ("gen_ai.user.message", "chat tiny", "chat-agent"),
        ("gen_ai.choice", "chat tiny", "chat-agent"),
    ]
    assert json.loads(rows[0][1]) == {"content": "What is 6*7?"}
    assert json.loads(rows[1][1])["message"]["content"] == "42"
    span_ids = duckdb.sql(f"SELECT DISTINCT span_id FROM read_parquet('{data_dir}/logs/**/*.parquet')").fetchall()
    assert span_ids == [(format(span.get_span_context().span_id, "016x"),)]
