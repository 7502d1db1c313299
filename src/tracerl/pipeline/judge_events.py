"""The judge's verdicts as OpenTelemetry ``gen_ai.evaluation.result`` events, for the trace UIs kept beside tracerl.

``tracerl pipeline judge --evaluation-events`` writes every verdict that has no event yet as a log record
of the ``logs`` table (``OUT/logs/``, the folder where the collector keeps OTLP log records,
:data:`tracerl.schemas.logs.LOGS_SCHEMA`), shaped as the GenAI conventions define the event (semantic
conventions v1.41.0, ``docs/gen-ai/gen-ai-events.md``; names in :mod:`tracerl.schemas.attributes`):
``gen_ai.evaluation.name`` (the judge's reward name), and

- a scored verdict: ``gen_ai.evaluation.score.value`` and ``gen_ai.evaluation.explanation`` (the
  judge's reason);
- a failed one (the judge could not judge the episode's group): no score, ``error.type`` (the
  conventions' "class of error the operation ended with": the HTTP status code, else the exception's
  fully-qualified class name, as the judge recorded it; ``_OTHER``, the conventions' fallback, for a
  judgment written before the judge recorded it) and ``gen_ai.evaluation.explanation`` = the error,
  so a UI shows which episodes have no verdict and why. A later run that scores it writes its event
  beside this one;

with ``gen_ai.response.id`` when the episode is one call's answer. The record carries the trace and
span id of the episode's span (its ``tracerl.episode`` span, else its root span), which is how the
conventions parent an event to the operation it evaluates. ``tracerl.episode.id`` names the episode.
Episodes skipped (too long, left by ``--max-calls``) were not evaluated: no event.

Why rows of the logs table and not the OTel Logs API: the judge reads finished episodes from Parquet,
long after their spans ended, in a process that never saw them, and the data dir is where tracerl's
own tools look. Where the environment names an OTLP endpoint for logs
(``OTEL_EXPORTER_OTLP_[LOGS_]ENDPOINT``), the same events are also sent there through the SDK
(:mod:`tracerl.pipeline.judge_events_otlp`), before they are written: a send that fails leaves them
unwritten, for the next run to send and write (delivery at least once).

The pipeline never takes these events as rewards (their scope is ``tracerl.pipeline.judge``,
counted ``tracerl_judge``): the judge's rewards file already holds the scores. Writing is idempotent:
an event is keyed by episode, name and the verdict's time, and a verdict whose event is already in
``OUT/logs/`` is not written again, so a run that was killed before its events were written leaves
them to the next run.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

import tracerl
from tracerl.core.storage import hour_partition, write_parquet_atomic
from tracerl.pipeline.judge_events_otlp import EventsNotSent, otlp_logs_endpoint, send_events
from tracerl.pipeline.layouts import attribute_path
from tracerl.pipeline.location import locate
from tracerl.pipeline.sql_text import sql_list, sql_str
from tracerl.schemas import attributes as A
from tracerl.schemas.logs import log_row, logs_table


@dataclass(frozen=True)
class EvaluatedSpan:
    """Where an episode's verdict is parented: its span, and its one call's response id (None if it made several)."""

    trace_id: str
    span_id: str
    response_id: str | None


# each episode of the policy calls: its tracerl.episode span, else its root (a span whose parent is not a span of
# the episode), the earliest; and the response id of its call when it made one
_EVALUATED_SQL = f"""
    WITH spans_of AS (
        SELECT episode_id, trace_id, span_id, parent_span_id, name, start_ns
        FROM span_meta WHERE episode_id IN (SELECT episode_id FROM policy_calls)
    ),
    roots AS (
        SELECT s.episode_id, s.trace_id, s.span_id,
               row_number() OVER (PARTITION BY s.episode_id
                                  ORDER BY s.name <> {sql_str(A.EPISODE_SPAN_NAME)}, s.start_ns, s.trace_id, s.span_id) AS n
        FROM spans_of s LEFT JOIN spans_of p
          ON p.episode_id = s.episode_id AND p.trace_id = s.trace_id AND p.span_id = s.parent_span_id
        WHERE s.name = {sql_str(A.EPISODE_SPAN_NAME)} OR p.span_id IS NULL
    ),
    one_call AS (
        SELECT episode_id, CASE WHEN count(*) = 1 THEN min(response_id) END AS response_id FROM policy_calls GROUP BY 1
    )
    SELECT r.episode_id, r.trace_id, r.span_id, c.response_id
    FROM roots r LEFT JOIN one_call c USING (episode_id) WHERE r.n = 1
"""


def evaluated_spans(con: duckdb.DuckDBPyConnection) -> dict[str, EvaluatedSpan]:
    """episode_id -> the span its verdict is parented to, from an analysis (``span_meta``, ``policy_calls``)."""
    return {episode: EvaluatedSpan(trace, span, response) for episode, trace, span, response in con.execute(_EVALUATED_SQL).fetchall()}


# error.type when the judgment line predates the judge recording it: the conventions' fallback value
UNKNOWN_ERROR_TYPE = "_OTHER"
EVENT_STATUSES = ("scored", "failed")  # the verdicts that are evaluations: skipped episodes were never sent


@dataclass(frozen=True)
class EvaluationEvent:
    """One verdict as the conventions' event: the span it is parented to (None: not found), its time, its attributes."""

    trace_id: str | None
    span_id: str | None
    time_unix_nano: int
    attributes: dict[str, Any]

    def row(self, observed_ns: int) -> dict[str, Any]:
        """The event as a row of the ``logs`` table."""
        return log_row(
            trace_id=self.trace_id, span_id=self.span_id, time_unix_nano=self.time_unix_nano, observed_time_unix_nano=observed_ns,
            severity_number=None, severity_text=None, event_name=A.GEN_AI_EVALUATION_RESULT_EVENT, body=None,
            attributes=self.attributes, resource={A.SERVICE_NAME: A.JUDGE_AGENT}, scope_name=A.JUDGE_EVENTS_SCOPE,
            scope_version=tracerl.__version__,
        )


@dataclass(frozen=True)
class EventsWritten:
    """What a run did with its new events: how many were written to ``logs/``, where they were sent too."""

    written: int = 0
    endpoint: str | None = None  # the OTLP endpoint the environment names, None: none
    not_sent: str | None = None  # why the endpoint did not take them (then none was written either)


def _time_ns(verdict: dict[str, Any]) -> int:
    return int(verdict["unix"] * 1e9)


def _written(logs: Path) -> set[tuple[str, str, int]]:
    """(episode, evaluation name, time) of the judge's events already in ``logs`` (the files a build reads:
    none being written, a compaction's inputs or outputs, not both)."""
    files = locate(str(logs)).files() if logs.is_dir() else []
    if not files:
        return set()
    with duckdb.connect() as con:
        rows = con.execute(
            f"""SELECT json_extract_string(attributes, {attribute_path(A.EPISODE_ID)}),
                       json_extract_string(attributes, {attribute_path(A.GEN_AI_EVALUATION_NAME)}), time_unix_nano
                FROM read_parquet({sql_list(files)}, union_by_name = true, hive_partitioning = false)
                WHERE scope_name = {sql_str(A.JUDGE_EVENTS_SCOPE)} AND event_name = {sql_str(A.GEN_AI_EVALUATION_RESULT_EVENT)}"""
        ).fetchall()
    return {(episode, name, t) for episode, name, t in rows}


def evaluation_event(verdict: dict[str, Any], name: str, evaluated: EvaluatedSpan | None) -> EvaluationEvent:
    """A scored or failed verdict (a judgment line) as a ``gen_ai.evaluation.result`` event."""
    attributes: dict[str, Any] = {A.GEN_AI_EVALUATION_NAME: name}
    if verdict["status"] == "scored":
        attributes[A.GEN_AI_EVALUATION_SCORE_VALUE] = float(verdict["score"])
        explanation = verdict.get("explanation")
    elif verdict["status"] == "failed":
        attributes[A.ERROR_TYPE] = verdict.get("error_type") or UNKNOWN_ERROR_TYPE
        explanation = verdict.get("reason")
    else:
        raise ValueError(f"episode {verdict['episode_id']}: a {verdict['status']!r} judgment is no evaluation ({EVENT_STATUSES})")
    attributes[A.EPISODE_ID] = verdict["episode_id"]
    if explanation:
        attributes[A.GEN_AI_EVALUATION_EXPLANATION] = str(explanation)
    if evaluated is not None and evaluated.response_id:
        attributes[A.GEN_AI_RESPONSE_ID] = evaluated.response_id
    return EvaluationEvent(evaluated.trace_id if evaluated else None, evaluated.span_id if evaluated else None,
                           _time_ns(verdict), attributes)


def write_evaluation_events(folder: Path, verdicts: list[dict[str, Any]], name: str, evaluated: dict[str, EvaluatedSpan]) -> EventsWritten:
    """Send the scored and failed ``verdicts`` (judgment lines) that have no event in ``folder/logs`` yet to the
    environment's OTLP endpoint, if it names one, then write them there as one logs file."""
    logs = folder / "logs"
    done = _written(logs)
    events = [evaluation_event(v, name, evaluated.get(v["episode_id"])) for v in verdicts
              if v["status"] in EVENT_STATUSES and (v["episode_id"], name, _time_ns(v)) not in done]
    endpoint = otlp_logs_endpoint()
    if not events:
        return EventsWritten(0, endpoint)
    if endpoint is not None:
        try:
            send_events(events, endpoint)
        except EventsNotSent as exc:
            return EventsWritten(0, endpoint, str(exc))
    logs.mkdir(parents=True, exist_ok=True)
    observed = time.time_ns()
    write_parquet_atomic(logs_table([e.row(observed) for e in events]), logs, prefix="judge-events", partition=hour_partition())
    return EventsWritten(len(events), endpoint)
