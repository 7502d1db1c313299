"""`tracerl pipeline judge --evaluation-events`: failed verdicts as events too, and every event sent to the
OTLP endpoint the environment names, as any OpenTelemetry process sends its logs.

The judge is a scripted one behind a gate that fails chosen tasks' calls (tracerl_testing.judges); the
receiving end is tracerl's own collector on loopback (OTLP/HTTP and gRPC), and what it received is read
back from the Parquet it writes, beside the rows the judge wrote into the data dir. test_evaluation_events.py
covers the scored verdicts' events and how the build reads events; the conventions' names are spelled out
here too, so a wrong constant fails.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from typer.testing import CliRunner

from tracerl.cli import app
from tracerl.instrumentation.parquet_exporter import ParquetSpanExporter
from tracerl.pipeline import build_dataset
from tracerl.pipeline.judge import JudgeOptions, judge
from tracerl.schemas import attributes as A
from tracerl_testing.judges import Canned, completion, error_body, gate
from tracerl_testing.tables import read_table

# semantic conventions v1.41.0, docs/gen-ai/gen-ai-events.md, "Event: gen_ai.evaluation.result"
EVALUATION = "gen_ai.evaluation.result"
NAME = "gen_ai.evaluation.name"
VALUE = "gen_ai.evaluation.score.value"
EXPLANATION = "gen_ai.evaluation.explanation"
ERROR_TYPE = "error.type"
# the variables every OpenTelemetry SDK reads (specification, "OpenTelemetry Protocol Exporter")
ENDPOINT, LOGS_ENDPOINT = "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT"
PROTOCOL, LOGS_PROTOCOL = "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_LOGS_PROTOCOL"
OTEL_VARIABLES = (ENDPOINT, LOGS_ENDPOINT, PROTOCOL, LOGS_PROTOCOL, "OTEL_LOGS_EXPORTER", "OTEL_SDK_DISABLED")

QUESTIONS = {"t1": "What is 2 + 2?", "t2": "What is 1 + 3?", "t3": "And 2 + 2?"}


def _text(role: str, content: str) -> dict:
    return {"role": role, "parts": [{"type": "text", "content": content}]}


def _run_agent(data_dir: Path, runs: list[tuple[str, str, str]]) -> Path:
    """Each (episode, task, answer) as an agent traced by the OTel SDK records it: an episode span and one
    call answering the task's question, exported by tracerl's Parquet exporter (real trace and span ids)."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(ParquetSpanExporter(data_dir)))
    tracer = provider.get_tracer("agent")
    for episode, task, answer in runs:
        baggage = {A.EPISODE_ID: episode, A.TASK_ID: task, A.SPLIT: "train"}
        with tracer.start_as_current_span(A.EPISODE_SPAN_NAME, attributes=baggage):
            with tracer.start_as_current_span("chat m", kind=trace.SpanKind.CLIENT, attributes={
                **baggage, A.GEN_AI_OPERATION: "chat", A.GEN_AI_PROVIDER_NAME: "openai", A.GEN_AI_REQUEST_MODEL: "m",
                A.GEN_AI_RESPONSE_ID: f"{episode}-r", A.PROMPT_TOKEN_IDS: [1, 2], A.COMPLETION_TOKEN_IDS: [ord(c) for c in answer],
                A.COMPLETION_LOGPROBS: [-0.1] * len(answer), A.GEN_AI_INPUT_MESSAGES: json.dumps([_text("user", QUESTIONS[task])]),
                A.GEN_AI_OUTPUT_MESSAGES: json.dumps([_text("assistant", answer)])}):
                pass
    provider.shutdown()
    return data_dir


def _episode_span(data_dir: Path, episode: str) -> tuple[str, str]:
    """(trace id, span id) of ``episode``'s episode span, as the spans table holds them."""
    [found] = [(r["trace_id"], r["span_id"]) for r in read_table(data_dir, "spans").to_pylist()
               if r["name"] == A.EPISODE_SPAN_NAME and json.loads(r["attributes"])[A.EPISODE_ID] == episode]
    return found


def _score(context: str, trajectory: str) -> float:
    return 1.0 if trajectory.rsplit("[assistant] ", 1)[-1].strip() == "4" else 0.2


@pytest.fixture(autouse=True)
def no_otlp_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    """The machine's own OTel settings stay out: each test names the endpoint it sends to."""
    for name in OTEL_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture()
def three_tasks(data_dir: Path) -> Path:
    """t1 run twice (right, wrong), t2 and t3 once each: three groups."""
    return _run_agent(data_dir, [("e1", "t1", "4"), ("e2", "t1", "5"), ("e3", "t2", "4"), ("e4", "t3", "4")])


def _events(folder: Path) -> dict[tuple[str, float], dict]:
    """The judge's evaluation events under ``folder``/logs by (episode, time), attributes decoded."""
    rows = [r for r in read_table(folder, "logs").to_pylist() if r["scope_name"] == "tracerl.pipeline.judge"]
    assert all(r["event_name"] == EVALUATION and r["service_name"] == "tracerl.judge" for r in rows)
    return {(json.loads(r["attributes"])["tracerl.episode.id"], r["time_unix_nano"]): {**r, "attributes": json.loads(r["attributes"])}
            for r in rows}


def _options(server, **kw) -> JudgeOptions:
    return JudgeOptions(url=server.base_url, model="scripted", concurrency=1, evaluation_events=True, **kw)


def test_a_group_the_judge_could_not_judge_is_an_event_with_the_error_type_and_why(three_tasks: Path, tmp_path: Path):
    # t2's calls fail with 503 twice (retried once), t3's judge answers no JSON twice: both groups fail
    unavailable = [Canned(503, {}, error_body(503))] * 2
    no_json = [Canned(body=completion("I prefer the first one."))] * 2
    with gate(_score, scripts={QUESTIONS["t2"]: unavailable, QUESTIONS["t3"]: no_json}) as server:
        first = judge(str(three_tasks), _options(server))
        assert (first.scored, first.failed, first.evaluation_events, first.events_endpoint) == (2, 2, 4, None)
        events = _events(three_tasks)
        by_episode = {episode: event for (episode, _), event in events.items()}
        assert {e: a["attributes"].get(VALUE) for e, a in by_episode.items()} == {"e1": 1.0, "e2": 0.2, "e3": None, "e4": None}
        unavailable_event, no_json_event = by_episode["e3"]["attributes"], by_episode["e4"]["attributes"]
        # the conventions' error.type: the HTTP status code, else the exception's fully-qualified class name
        assert unavailable_event[ERROR_TYPE] == "503" and unavailable_event[EXPLANATION].startswith("HTTP 503: ")
        assert no_json_event[ERROR_TYPE] == "tracerl.pipeline.judge_prompt.JudgeAnswerError"
        assert no_json_event[EXPLANATION] == "no JSON object in the answer"
        assert set(unavailable_event) == {NAME, ERROR_TYPE, EXPLANATION, "gen_ai.response.id", "tracerl.episode.id"}
        assert unavailable_event[NAME] == "judge" and "gen_ai.evaluation.score.label" not in unavailable_event
        # parented to the episode's span, as the scored ones are
        assert (by_episode["e3"]["trace_id"], by_episode["e3"]["span_id"]) == _episode_span(three_tasks, "e3")

        # the next run judges the failed groups again: their scores join the failures, which stay in the record
        second = judge(str(three_tasks), _options(server))
    assert (second.scored, second.evaluation_events) == (2, 2)
    after = _events(three_tasks)
    assert set(after) > set(events) and len(after) == 6
    latest = {}
    for (episode, t), event in sorted(after.items(), key=lambda item: item[0][1]):
        latest[episode] = event["attributes"]
    assert {e: (a.get(VALUE), a.get(ERROR_TYPE)) for e, a in latest.items()} == {
        "e1": (1.0, None), "e2": (0.2, None), "e3": (1.0, None), "e4": (1.0, None)}
    # never read back as rewards, failed or not: the judge's rewards file holds the scores
    manifest = build_dataset(three_tasks, tmp_path / "out", advantage="none")
    assert manifest["counts"]["rewards"]["evaluations_skipped"] == {"tracerl_judge": 6}


def test_a_judgment_written_before_the_judge_recorded_the_error_type_gets_the_conventions_fallback():
    from tracerl.pipeline.judge_events import evaluation_event

    old = {"episode_id": "e1", "status": "failed", "reason": "HTTP 502: bad gateway", "unix": 1.5}
    event = evaluation_event(old, "judge", None)
    assert event.attributes == {NAME: "judge", ERROR_TYPE: "_OTHER", EXPLANATION: "HTTP 502: bad gateway", "tracerl.episode.id": "e1"}
    assert (event.trace_id, event.span_id, event.time_unix_nano) == (None, None, 1_500_000_000)


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_the_events_are_sent_to_the_otlp_endpoint_the_environment_names(
    protocol: str, three_tasks: Path, start_collector, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
):
    collector = start_collector(out=str(tmp_path / "collected"), flush_interval_s=0.2, grpc=protocol == "grpc")
    if protocol == "grpc":  # the logs-only variables, which win over the general ones
        monkeypatch.setenv(ENDPOINT, "http://127.0.0.1:9")  # nothing listens there
        monkeypatch.setenv(LOGS_ENDPOINT, f"http://127.0.0.1:{collector.grpc_port}")
        monkeypatch.setenv(LOGS_PROTOCOL, "grpc")
        shown = f"http://127.0.0.1:{collector.grpc_port}"
    else:  # the base URL; the exporter adds /v1/logs
        monkeypatch.setenv(ENDPOINT, collector.http_url())
        shown = collector.http_url()
    with gate(_score, scripts={QUESTIONS["t2"]: [Canned(503, {}, error_body(503))] * 2}) as server:
        done = CliRunner().invoke(app, ["pipeline", "judge", "--spans", str(three_tasks), "--judge-url", server.base_url,
                                        "--judge-model", "scripted", "--concurrency", "1", "--evaluation-events"])
    assert done.exit_code == 0, done.output
    assert f"4 {EVALUATION} event(s) written to {three_tasks / 'logs'}" in done.output
    assert f"4 evaluation event(s) also sent to {shown}" in " ".join(done.output.split())
    collector.stop()

    written, received = _events(three_tasks), _events(Path(collector.config.out))
    assert set(received) == set(written) and len(received) == 4  # the failed verdict's event included
    for key, event in written.items():
        assert {c: received[key][c] for c in ("trace_id", "span_id", "attributes", "scope_version")} == \
            {c: event[c] for c in ("trace_id", "span_id", "attributes", "scope_version")}, key


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_an_endpoint_that_does_not_take_them_leaves_them_unwritten_for_the_next_run(
    three_tasks: Path, collector, monkeypatch: pytest.MonkeyPatch,
):
    monkeypatch.setenv(ENDPOINT, f"http://127.0.0.1:{_closed_port()}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")  # seconds, in the Python SDK
    with gate(_score) as server:
        refused = judge(str(three_tasks), _options(server))
        assert (refused.scored, refused.evaluation_events) == (4, 0)
        assert "did not take the 4 event(s)" in refused.events_not_sent and not (three_tasks / "logs").exists()
        assert any(note.startswith("evaluation events not sent: ") and "the next run sends and writes them" in note
                   for note in refused.messages(None))

        monkeypatch.setenv(ENDPOINT, collector.http_url())
        again = judge(str(three_tasks), _options(server))
    assert (again.calls, again.evaluation_events, again.events_not_sent) == (0, 4, None)  # nothing judged twice
    collector.stop()
    assert set(_events(Path(collector.config.out))) == set(_events(three_tasks))


@pytest.mark.parametrize(("setting", "value", "outcome"), [
    ("OTEL_LOGS_EXPORTER", "none", "written, not sent"),
    ("OTEL_SDK_DISABLED", "true", "written, not sent"),
    (PROTOCOL, "http/json", "OTLP protocol 'http/json' (OTEL_EXPORTER_OTLP_[LOGS_]PROTOCOL): the OpenTelemetry SDK's log "
                            "exporters take http/protobuf or grpc"),
])
def test_the_sdks_own_switches_turn_the_sending_off_and_a_protocol_it_lacks_is_named(
    setting: str, value: str, outcome: str, three_tasks: Path, monkeypatch: pytest.MonkeyPatch,
):
    monkeypatch.setenv(ENDPOINT, f"http://127.0.0.1:{_closed_port()}")
    monkeypatch.setenv(setting, value)
    with gate(_score) as server:
        summary = judge(str(three_tasks), _options(server))
    if outcome == "written, not sent":
        assert (summary.evaluation_events, summary.events_endpoint, summary.events_not_sent) == (4, None, None)
    else:
        assert summary.evaluation_events == 0 and summary.events_not_sent.startswith(outcome)
