"""Message content sent as OTLP log records, as the official GenAI instrumentations can send it,
reaches the dataset: a real OTel SDK exports spans and logs to a real collector, the build joins
each call's records to it. Records that name no span, or a span that never arrived, and GenAI
events of a name the pipeline does not know, are counted."""

from __future__ import annotations

import json
import random

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from tracerl.pipeline import build_dataset, dataset_table
from tracerl.schemas import attributes as A

INPUTS = [{"role": "user", "parts": [{"type": "text", "content": "2+2?"}]}]
OUTPUTS = [{"role": "assistant", "parts": [{"type": "text", "content": "4"}], "finish_reason": "stop"}]


def _call(tracer, logger, episode: str, content) -> None:
    """One episode: an LLM-call span (token ids as tracerl's capture adds them) whose content goes out as log records."""
    attributes = {A.EPISODE_ID: episode, A.TASK_ID: "t", A.SPLIT: "train", A.GEN_AI_OPERATION: "chat", A.GEN_AI_PROVIDER_NAME: "openai",
                  A.GEN_AI_REQUEST_MODEL: "m", A.PROMPT_TOKEN_IDS: [1, 2, 3], A.COMPLETION_TOKEN_IDS: [4, 5], A.COMPLETION_LOGPROBS: [-0.1, -0.2]}
    with tracer.start_as_current_span("chat m", kind=trace.SpanKind.CLIENT, attributes=attributes):
        content(logger)
    with tracer.start_as_current_span(A.REWARD_SPAN_NAME, attributes={A.EPISODE_ID: episode, A.REWARD_VALUE: 1.0}):
        pass


def _details(logger) -> None:
    logger.emit(event_name=A.GEN_AI_OPERATION_DETAILS_EVENT,
                attributes={A.GEN_AI_INPUT_MESSAGES: json.dumps(INPUTS), A.GEN_AI_OUTPUT_MESSAGES: json.dumps(OUTPUTS)})


def _per_message(logger) -> None:
    """GenAI before 1.37: an event per message, an event per choice, the message in the body."""
    logger.emit(event_name="gen_ai.system.message", body={"content": "Be brief."})
    logger.emit(event_name="gen_ai.user.message", body={"content": "2+2?"})
    logger.emit(event_name="gen_ai.choice", body={"index": 0, "finish_reason": "stop", "message": {"content": "4"}})


def test_content_in_log_records_is_joined_to_its_call(collector, tmp_path):
    spans, logs = TracerProvider(), LoggerProvider()
    spans.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{collector.http_url()}/v1/traces")))
    logs.add_log_record_processor(SimpleLogRecordProcessor(OTLPLogExporter(endpoint=f"{collector.http_url()}/v1/logs")))
    tracer, logger = spans.get_tracer("agent"), logs.get_logger("opentelemetry.instrumentation.genai")
    _call(tracer, logger, "e1", _details)
    _call(tracer, logger, "e2", _per_message)
    lost = SpanContext(random.getrandbits(128), random.getrandbits(64), is_remote=False, trace_flags=TraceFlags(1))
    logger.emit(event_name=A.GEN_AI_OPERATION_DETAILS_EVENT, attributes={A.GEN_AI_INPUT_MESSAGES: "[]"},
                context=trace.set_span_in_context(NonRecordingSpan(lost)))  # its span never arrives
    logger.emit(event_name="gen_ai.user.message", body={"content": "outside any span"})
    for _ in range(2):  # an event of a later conventions version: counted by name, never guessed at
        logger.emit(event_name="gen_ai.client.inference.operation.details.v2", attributes={A.GEN_AI_INPUT_MESSAGES: "[]"})
    spans.shutdown(), logs.shutdown()
    collector.stop()

    manifest = build_dataset(collector.config.out, tmp_path / "out")
    rows = {r["episode_id"]: r for r in dataset_table(tmp_path / "out").to_pylist()}
    assert (json.loads(rows["e1"]["input_messages"]), json.loads(rows["e1"]["output_messages"])) == (INPUTS, OUTPUTS)
    assert json.loads(rows["e2"]["input_messages"]) == [
        {"role": "system", "content": "Be brief.", "tool_calls": None, "tool_call_id": None},
        {"role": "user", "content": "2+2?", "tool_calls": None, "tool_call_id": None},
    ]
    assert json.loads(rows["e2"]["output_messages"]) == [{"role": "assistant", "content": "4", "tool_calls": None, "finish_reason": "stop"}]
    assert manifest["counts"]["spans"]["content_layouts"] == {"gen_ai.log": 2}
    assert manifest["counts"]["logs"] == {"content_records": 6, "spans_with_content": 3, "without_span": 1, "span_missing": 1,
                                          "unknown_events": {"gen_ai.client.inference.operation.details.v2": 2}}
    assert any("events this tracerl does not read" in w and "2 x gen_ai.client.inference.operation.details.v2" in w
               for w in manifest["warnings"])
    assert any("1 log record(s) with message content name no span" in w for w in manifest["warnings"])
    assert any("1 span(s) have message log records but are not in the spans read" in w for w in manifest["warnings"])
