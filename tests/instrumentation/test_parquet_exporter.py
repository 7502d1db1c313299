"""The embedded sink: spans become readable, lossless Parquet files, batched by rows and age,
on disk after a flush."""

from __future__ import annotations

import time
from importlib.metadata import entry_points
from pathlib import Path

import pyarrow.parquet as pq
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link

from tracerl.instrumentation.parquet_exporter import ParquetSpanExporter
from tracerl.schemas import SPANS_SCHEMA
from tracerl.schemas import attributes as A
from tracerl.schemas import environment as E
from tracerl.schemas.tokens import pack_ids


def finished_spans(build) -> list:
    """Spans made by ``build(tracer)`` on a private provider (the global one is untouched)."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "svc"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    build(provider.get_tracer("test-scope", "1.2"))
    return list(memory.get_finished_spans())


def test_the_entry_point_named_tracerl_is_this_exporter():
    (ep,) = entry_points(group="opentelemetry_traces_exporter", name="tracerl")
    assert ep.load() is ParquetSpanExporter


def test_a_batch_becomes_one_file_with_hot_fields_promoted_and_nothing_lost(tmp_path: Path):
    def build(tracer):
        with tracer.start_as_current_span("root") as root:
            with tracer.start_as_current_span("llm", links=[Link(root.get_span_context(), {"why": "x"})]) as span:
                span.set_attribute(A.EPISODE_ID, "ep1")
                span.set_attribute(A.GEN_AI_AGENT_NAME, "planner")
                span.set_attribute(A.PROMPT_TOKEN_IDS, [1, 2, 3])
                span.set_attribute(A.COMPLETION_TOKEN_IDS, pack_ids([4, 5]))
                span.set_attribute(A.COMPLETION_LOGPROBS, [-0.5, -0.25])
                span.set_attribute(A.POLICY_VERSION, 3)
                span.set_attribute("custom.flag", True)
                span.add_event("thought", {"n": 1})

    exporter = ParquetSpanExporter(tmp_path)
    assert exporter.export(finished_spans(build)) is SpanExportResult.SUCCESS
    assert exporter.force_flush()
    (path,) = (tmp_path / "spans").glob("date=*/hour=*/*.parquet")
    table = pq.read_table(path)
    assert table.schema.equals(SPANS_SCHEMA, check_metadata=False)
    rows = {r["name"]: r for r in table.to_pylist()}
    llm, root = rows["llm"], rows["root"]
    assert llm["parent_span_id"] == root["span_id"] and llm["trace_id"] == root["trace_id"]
    assert (llm["episode_id"], llm["agent_name"], llm["policy_version"]) == ("ep1", "planner", 3)
    assert llm["prompt_token_ids"] == [1, 2, 3] and llm["completion_token_ids"] == [4, 5]
    assert llm["completion_logprobs"] == [-0.5, -0.25]
    assert '"custom.flag":true' in llm["attributes"] and "prompt_token_ids" not in llm["attributes"]
    assert '"thought"' in llm["events"] and root["span_id"] in llm["links"]
    assert llm["service_name"] == "svc" and (llm["scope_name"], llm["scope_version"]) == ("test-scope", "1.2")
    assert llm["kind"] == "INTERNAL" and llm["status_code"] == "UNSET"


def test_a_span_with_corrupt_tokens_is_rejected_and_the_rest_is_written(tmp_path: Path, caplog):
    def build(tracer):
        with tracer.start_as_current_span("bad") as span:
            span.set_attribute(A.PROMPT_TOKEN_IDS, "tokpack:i4:!!not-base64")
        tracer.start_span("good").end()

    exporter = ParquetSpanExporter(tmp_path)
    assert exporter.export(finished_spans(build)) is SpanExportResult.SUCCESS
    exporter.shutdown()
    (path,) = (tmp_path / "spans").glob("**/*.parquet")
    assert [r["name"] for r in pq.read_table(path).to_pylist()] == ["good"]
    assert exporter.spans_rejected == 1 and "corrupt" in caplog.text and "'bad'" in caplog.text


def test_data_dir_comes_from_the_environment(tmp_path: Path, monkeypatch):
    from tracerl.instrumentation.settings import settings

    monkeypatch.setenv(E.DATA_DIR_ENV, str(tmp_path / "from-env"))
    settings.cache_clear()
    try:
        exporter = ParquetSpanExporter()
    finally:
        monkeypatch.undo()
        settings.cache_clear()
    exporter.export(finished_spans(lambda t: t.start_span("x").end()))
    exporter.force_flush()
    assert len(list((tmp_path / "from-env" / "spans").glob("**/*.parquet"))) == 1


def test_an_unwritable_folder_is_a_failure_with_a_message(tmp_path: Path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    exporter = ParquetSpanExporter(blocker)
    exporter.export(finished_spans(lambda t: t.start_span("x").end()))
    assert exporter.force_flush() is False
    assert "could not write 1 spans" in caplog.text and E.DATA_DIR_ENV in caplog.text


def test_spans_are_batched_into_files_by_rows_and_by_age(tmp_path: Path):
    by_rows = ParquetSpanExporter(tmp_path / "rows", max_rows=3)
    for _ in range(7):
        by_rows.export(finished_spans(lambda t: t.start_span("x").end()))
    assert by_rows.files_written == 2 and by_rows.spans_written == 6  # the 7th waits for more, or for age
    by_rows.shutdown()
    assert by_rows.spans_written == 7
    assert sum(pq.read_metadata(p).num_rows for p in (tmp_path / "rows").glob("**/*.parquet")) == 7

    by_age = ParquetSpanExporter(tmp_path / "age", max_delay_s=0.2)
    by_age.export(finished_spans(lambda t: t.start_span("x").end()))
    deadline = time.monotonic() + 10
    while by_age.files_written == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert by_age.spans_written == 1  # committed by age alone, with no flush and no new spans


def test_a_flushed_provider_has_its_spans_on_disk(tmp_path: Path):
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from tracerl.instrumentation.parquet_exporter import CommitOnFlush

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(ParquetSpanExporter(tmp_path), schedule_delay_millis=60_000))
    provider.add_span_processor(CommitOnFlush())
    provider.get_tracer("t").start_span("x").end()
    assert provider.force_flush()
    assert [r["name"] for r in pq.read_table(tmp_path / "spans").to_pylist()] == ["x"]
    provider.shutdown()


def test_after_shutdown_nothing_is_written_silently(tmp_path: Path, caplog):
    exporter = ParquetSpanExporter(tmp_path)
    exporter.shutdown()
    assert exporter.export(finished_spans(lambda t: t.start_span("x").end())) is SpanExportResult.FAILURE
    assert "shut down" in caplog.text


def test_a_forked_child_does_not_write_the_parents_pending_rows_again(tmp_path: Path):
    import os

    exporter = ParquetSpanExporter(tmp_path)
    exporter.export(finished_spans(lambda t: t.start_span("parent's").end()))
    pid = os.fork()
    if pid == 0:  # the child commits what it holds and leaves at once
        exporter.shutdown()
        os._exit(0)
    os.waitpid(pid, 0)
    exporter.shutdown()
    names = [r["name"] for p in (tmp_path / "spans").glob("**/*.parquet") for r in pq.read_table(p).to_pylist()]
    assert names == ["parent's"]


def test_token_ids_packed_in_this_process_reach_parquet_without_a_base64_round_trip(tmp_path: Path, monkeypatch):
    """The packed string keeps the array it was packed from; through the SDK's span to the exporter, the
    exporter takes that array. The string itself is what an OTLP exporter sends, and decodes the same."""
    from tracerl.schemas import tokens

    def build(tracer):
        with tracer.start_as_current_span("llm") as span:
            span.set_attributes({A.PROMPT_TOKEN_IDS: pack_ids([7, 8, 9]), A.COMPLETION_TOKEN_IDS: pack_ids([10]),
                                 A.COMPLETION_LOGPROBS: tokens.pack_floats([-0.5])})

    spans = finished_spans(build)
    sent = spans[0].attributes[A.PROMPT_TOKEN_IDS]
    assert tokens.decode(str(sent)) == [7, 8, 9]  # what the wire carries decodes alike

    def no_decoding(*args, **kwargs):
        raise AssertionError("base64 decoded in the process that packed it")

    monkeypatch.setattr(tokens.base64, "b64decode", no_decoding)
    exporter = ParquetSpanExporter(tmp_path)
    assert exporter.export(spans) is SpanExportResult.SUCCESS
    exporter.shutdown()
    (row,) = pq.read_table(next((tmp_path / "spans").glob("**/*.parquet"))).to_pylist()
    assert (row["prompt_token_ids"], row["completion_token_ids"], row["completion_logprobs"]) == ([7, 8, 9], [10], [-0.5])
