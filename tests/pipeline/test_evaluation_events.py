"""OpenTelemetry GenAI ``gen_ai.evaluation.result`` events both ways: an evaluator's events become rewards
of the call (or episode) they evaluate, and ``tracerl pipeline judge`` writes its verdicts as such events.

The agent and the evaluator are the real OTel SDK: spans and log records exported over OTLP to a real
collector on loopback, or spans to tracerl's own Parquet exporter; every dataset is a real DuckDB build.
The conventions' names are spelled out here rather than taken from tracerl's constants, so a wrong
constant fails.
"""

from __future__ import annotations

import json

import duckdb
import pytest
from opentelemetry import context, trace
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from typer.testing import CliRunner

from tracerl.cli import app
from tracerl.instrumentation.parquet_exporter import ParquetSpanExporter
from tracerl.pipeline import BuildOptions, build_dataset, dataset_table, read_manifest
from tracerl.pipeline.doctor import diagnose
from tracerl.pipeline.judge import JudgeOptions, judge
from tracerl.schemas import attributes as A
from tracerl_testing.judges import scripted_judge
from tracerl_testing.scripted_server import running_scripted_server
from tracerl_testing.span_builders import episode_span, llm_call, trace_of, write_spans

# semantic conventions v1.41.0, docs/gen-ai/gen-ai-events.md, "Event: gen_ai.evaluation.result"
EVALUATION = "gen_ai.evaluation.result"
NAME = "gen_ai.evaluation.name"
VALUE = "gen_ai.evaluation.score.value"
LABEL = "gen_ai.evaluation.score.label"
EXPLANATION = "gen_ai.evaluation.explanation"
RESPONSE_ID = "gen_ai.response.id"
ERROR_TYPE = "error.type"


def _call(tracer, episode: str, response_id: str):
    """An LLM-call span with token ids, as tracerl's capture writes it (the caller ends it)."""
    return tracer.start_as_current_span("chat m", kind=trace.SpanKind.CLIENT, attributes={
        A.EPISODE_ID: episode, A.TASK_ID: "t", A.SPLIT: "train", A.GEN_AI_OPERATION: "chat", A.GEN_AI_PROVIDER_NAME: "openai",
        A.GEN_AI_REQUEST_MODEL: "m", A.GEN_AI_RESPONSE_ID: response_id,
        A.PROMPT_TOKEN_IDS: [1, 2, 3], A.COMPLETION_TOKEN_IDS: [4, 5], A.COMPLETION_LOGPROBS: [-0.1, -0.2]})


def _episode(tracer, episode: str):
    return tracer.start_as_current_span(A.EPISODE_SPAN_NAME, attributes={A.EPISODE_ID: episode, A.TASK_ID: "t", A.SPLIT: "train"})


def _steps(out) -> list[tuple[int, float]]:
    return sorted((r["step"], round(r["reward"], 6)) for r in dataset_table(out).to_pylist())


def test_an_evaluators_events_through_the_collector_become_rewards_of_what_they_evaluate(collector, tmp_path):
    spans, logs = TracerProvider(), LoggerProvider()
    spans.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{collector.http_url()}/v1/traces")))
    logs.add_log_record_processor(SimpleLogRecordProcessor(OTLPLogExporter(endpoint=f"{collector.http_url()}/v1/logs")))
    tracer, evaluator = spans.get_tracer("agent"), logs.get_logger("an.evaluator")
    with _episode(tracer, "e1") as episode:
        with _call(tracer, "e1", "resp-a"):
            # the Logs API's event, parented to the call it evaluates (the current span)
            evaluator.emit(event_name=EVALUATION, attributes={NAME: "relevance", VALUE: 0.5})
            # the Events API before opentelemetry-python 1.35 named the event in an attribute
            evaluator.emit(attributes={"event.name": EVALUATION, NAME: "format", VALUE: 0.1})
        with _call(tracer, "e1", "resp-b"):
            evaluator.emit(event_name=EVALUATION, attributes={NAME: "tone", LABEL: "polite"})  # a label is no reward
            evaluator.emit(event_name=EVALUATION, attributes={NAME: "relevance", ERROR_TYPE: "timeout"})  # a failed evaluation
        # a span event on the episode's span: the episode's outcome
        episode.add_event(EVALUATION, {NAME: "task_success", VALUE: 1.0, EXPLANATION: "the answer is right"})
    # after the fact, with no span to parent it to: the response id names the call
    evaluator.emit(event_name=EVALUATION, attributes={NAME: "relevance", VALUE: 0.25, RESPONSE_ID: "resp-b"},
                   context=context.Context())
    spans.shutdown(), logs.shutdown()
    collector.stop()

    manifest = build_dataset(collector.config.out, tmp_path / "out", advantage="none")
    assert _steps(tmp_path / "out") == [(0, 0.6), (1, 1.25)]  # relevance + format on call a; task_success + relevance on b
    rewards = manifest["counts"]["rewards"]
    assert rewards["by_source"] == {"evaluation": 4}
    assert rewards["by_name"] == {"format": 1, "relevance": 2, "task_success": 1}
    assert (rewards["evaluation_events"], rewards["evaluations_skipped"]) == (6, {"error": 1, "label_only": 1})
    assert manifest["counts"]["logs"]["unknown_events"] == {}  # an event the pipeline reads
    notes = diagnose(collector.config.out, BuildOptions())["notes"]
    assert any(n.startswith("2 gen_ai.evaluation.result event(s) not taken as rewards") and "1 x the evaluation failed" in n
               and "1 x a gen_ai.evaluation.score.label but no gen_ai.evaluation.score.value" in n for n in notes)


def test_span_events_through_tracerls_exporter_and_the_options_that_choose_them(data_dir, tmp_path):
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(ParquetSpanExporter(data_dir)))
    tracer = provider.get_tracer("agent")
    with _episode(tracer, "e1"):
        with _call(tracer, "e1", "r0") as first:
            first.add_event(EVALUATION, {NAME: "relevance", VALUE: 0.75})
        with _call(tracer, "e1", "r1") as second:
            second.add_event(EVALUATION, {NAME: "toxicity", VALUE: 0.9})
    provider.shutdown()

    build_dataset(data_dir, tmp_path / "all", advantage="none")
    assert _steps(tmp_path / "all") == [(0, 0.75), (1, 0.9)]
    chosen = build_dataset(data_dir, tmp_path / "one", advantage="none", evaluations=("relevance",))
    assert _steps(tmp_path / "one") == [(0, 0.75), (1, 0.0)]
    assert chosen["counts"]["rewards"]["evaluations_skipped"] == {"not_selected": 1}
    assert not any("evaluation.result" in w for w in chosen["warnings"])  # a choice, not a problem

    cli = CliRunner()
    done = cli.invoke(app, ["pipeline", "build-dataset", "--spans", str(data_dir), "--out", str(tmp_path / "cli"), "--evaluation", "toxicity"])
    assert done.exit_code == 0, done.output
    assert read_manifest(tmp_path / "cli")["parameters"]["evaluations"] == ["toxicity"]
    assert _steps(tmp_path / "cli")[1][1] == 0.9
    off = cli.invoke(app, ["pipeline", "doctor", "--spans", str(data_dir), "--json", "--no-evaluation-rewards"])
    assert off.exit_code == 0, off.output
    counts = json.loads(off.output)["counts"]
    assert counts["rewards"]["evaluations_skipped"] == {"off": 2} and counts["rewards"]["by_source"] == {}
    assert counts["episodes"]["without_reward"] == 1


def _text(role: str, content: str) -> dict:
    return {"role": role, "parts": [{"type": "text", "content": content}]}


def _unlabelled(episode: str, task: str, answers: list[str]) -> list[dict]:
    """An episode of one call per answer; a single call has the response id ``{episode}-r0``."""
    rows = [episode_span(episode, 0, 1000, task=task)]
    for i, answer in enumerate(answers):
        messages = {A.GEN_AI_INPUT_MESSAGES: json.dumps([_text("user", "What is 2 + 2?")]),
                    A.GEN_AI_OUTPUT_MESSAGES: json.dumps([_text("assistant", answer)])}
        rows.append(llm_call(episode, f"c{i}", 10 + 20 * i, 20 + 20 * i, [1, 2], [ord(c) for c in answer], extra=messages,
                             response_id=f"{episode}-r{i}"))
    return rows


def _right(context: str, trajectory: str) -> float:
    return 1.0 if trajectory.rstrip().endswith("4") else 0.2


@pytest.fixture()
def judged_data(data_dir):
    return write_spans(data_dir, [*_unlabelled("e1", "t1", ["4"]), *_unlabelled("e2", "t1", ["5"]), *_unlabelled("e3", "t2", ["3", "4"])])


def _events(data_dir) -> list[dict]:
    rows = duckdb.sql(f"SELECT * FROM read_parquet('{data_dir}/logs/**/*.parquet', hive_partitioning = false)").fetchall()
    columns = duckdb.sql(f"SELECT * FROM read_parquet('{data_dir}/logs/**/*.parquet', hive_partitioning = false) LIMIT 0").columns
    return [dict(zip(columns, row)) for row in rows]


def test_the_judges_verdicts_are_evaluation_events_on_each_episodes_span(judged_data, tmp_path):
    options = dict(url="", model="scripted")
    with running_scripted_server(scripted_judge(_right)) as server:
        options["url"] = server.base_url
        first = judge(str(judged_data), JudgeOptions(**options))  # off by default: no events
        assert first.scored == 3 and not (judged_data / "logs").exists()
        backfill = judge(str(judged_data), JudgeOptions(**options, evaluation_events=True))
        again = CliRunner().invoke(app, ["pipeline", "judge", "--spans", str(judged_data), "--judge-url", server.base_url,
                                         "--judge-model", "scripted", "--evaluation-events"])
    # the verdicts already given are written as events without asking the judge again; once only
    assert (backfill.calls, backfill.evaluation_events) == (0, 3)
    assert again.exit_code == 0 and f"0 gen_ai.evaluation.result event(s) written to {judged_data / 'logs'}" in again.output, again.output

    events = {json.loads(e["attributes"])["tracerl.episode.id"]: e for e in _events(judged_data)}
    assert set(events) == {"e1", "e2", "e3"}
    for episode, score in {"e1": 1.0, "e2": 0.2, "e3": 1.0}.items():
        event = events[episode]
        assert event["event_name"] == EVALUATION and event["scope_name"] == "tracerl.pipeline.judge"
        # parented to the episode's span, with the ids the spans table holds
        assert (event["trace_id"], event["span_id"]) == (trace_of(episode), "root".ljust(16, "0"))
        attributes = json.loads(event["attributes"])
        assert attributes[NAME] == "judge" and attributes[VALUE] == score and attributes[EXPLANATION] == "scripted"
        # the evaluated completion is named when the episode is one call's answer
        assert attributes.get(RESPONSE_ID) == (None if episode == "e3" else f"{episode}-r0")
    assert set(json.loads(events["e3"]["attributes"])) == {NAME, VALUE, EXPLANATION, "tracerl.episode.id"}

    # read back by the pipeline: seen, never counted twice (the judge's rewards file holds the scores)
    manifest = build_dataset(judged_data, tmp_path / "out", advantage="none")
    assert {r["episode_id"]: r["reward"] for r in dataset_table(tmp_path / "out").to_pylist() if r["step"] == 0} == {
        "e1": 1.0, "e2": 0.2, "e3": 0.0}
    assert manifest["counts"]["rewards"]["by_source"] == {"late": 3}
    assert manifest["counts"]["rewards"]["evaluations_skipped"] == {"tracerl_judge": 3}
    assert not any("evaluation" in w for w in manifest["warnings"])
