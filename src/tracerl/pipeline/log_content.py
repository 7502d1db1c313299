"""Messages that instrumentations send as OTLP log records instead of span attributes.

The official GenAI instrumentations (``opentelemetry-instrumentation-openai-v2`` and the
``opentelemetry-util-genai`` they share) can put a call's content in log records, which the
collector keeps in the data dir's ``logs/``: the ``gen_ai.client.inference.operation.details``
event (messages as attributes, in the conventions' typed parts), or, before GenAI 1.37, one
event per message (``gen_ai.user.message``... with the message in the body) and one per
choice (``gen_ai.choice``). Each record names the span it belongs to; this stage gathers the
records of each span into one row of input and output messages, which the writer uses for
calls whose span carries no content of its own (content layout ``gen_ai.log``).
"""

from __future__ import annotations

from typing import Any

import duckdb

from tracerl.pipeline.counts import grouped, scalar
from tracerl.pipeline.sql_text import empty_select, sql_list, sql_str
from tracerl.schemas import attributes as A
from tracerl.schemas.logs import LOGS_SCHEMA

_DETAILS = sql_str(A.GEN_AI_OPERATION_DETAILS_EVENT)
_ROLES = "MAP {" + ", ".join(f"{sql_str(event)}: {sql_str(role)}" for event, role in A.GEN_AI_MESSAGE_EVENTS.items()) + "}"
CONTENT_EVENTS = sql_list([A.GEN_AI_OPERATION_DETAILS_EVENT, A.GEN_AI_CHOICE_EVENT, *A.GEN_AI_MESSAGE_EVENTS])
# every GenAI event some stage reads: content here, evaluation results in src/tracerl/pipeline/rewards.py
KNOWN_EVENTS = sql_list([A.GEN_AI_OPERATION_DETAILS_EVENT, A.GEN_AI_CHOICE_EVENT, *A.GEN_AI_MESSAGE_EVENTS, A.GEN_AI_EVALUATION_RESULT_EVENT])


def _details(side: str) -> str:
    key = sql_str(f'$."{side}"')
    return f"coalesce(json_extract_string(attributes, {key}), json_extract_string(body, {key}))"


def build_log_content(con: duckdb.DuckDBPyConnection, log_files: list[str], keep: str = "true") -> None:
    """Table ``log_content``: one row per span with message log records (trace_id, span_id, input and output JSON).

    Table ``log_records``: every GenAI event record (``gen_ai.*``), kept so that doctor can count
    the content records without a span id, those whose span never arrived, and events of a
    name no stage reads (a later version of the conventions): counted, never guessed at. The
    rewards stage reads its ``gen_ai.evaluation.result`` records (``scope_name`` tells the judge's own).
    ``keep``: a condition on a record (a bucket keeps those of its own traces).
    """
    source = (
        f"read_parquet({sql_list(log_files)}, union_by_name = true, file_row_number = true, filename = true)"
        if log_files
        else f"(SELECT *, NULL::VARCHAR AS filename, NULL::BIGINT AS file_row_number FROM ({empty_select(LOGS_SCHEMA)}))"
    )
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE log_records AS
        SELECT trace_id, span_id, event_name, body, attributes, time_unix_nano, scope_name, filename, file_row_number
        FROM {source} WHERE starts_with(event_name, 'gen_ai.') AND {keep}
        """
    )
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE log_content AS
        WITH records AS (
            SELECT *, row_number() OVER (ORDER BY time_unix_nano, filename, file_row_number) AS n
            FROM log_records WHERE span_id IS NOT NULL AND trace_id IS NOT NULL AND event_name IN {CONTENT_EVENTS}
        ),
        details AS (
            SELECT trace_id, span_id, 0 AS preference,
                   arg_max({_details(A.GEN_AI_INPUT_MESSAGES)}, n) AS input_messages,
                   arg_max({_details(A.GEN_AI_OUTPUT_MESSAGES)}, n) AS output_messages
            FROM records WHERE event_name = {_DETAILS} GROUP BY ALL
        ),
        per_message AS (
            SELECT trace_id, span_id, 1 AS preference,
                   to_json(list(json_object(
                       'role', coalesce(json_extract_string(body, '$.role'), {_ROLES}[event_name]),
                       'content', json_extract(body, '$.content'),
                       'tool_calls', json_extract(body, '$.tool_calls'),
                       'tool_call_id', json_extract_string(body, '$.id')
                   ) ORDER BY n) FILTER (WHERE event_name <> '{A.GEN_AI_CHOICE_EVENT}'))::VARCHAR AS input_messages,
                   to_json(list(json_object(
                       'role', 'assistant',
                       'content', json_extract(body, '$.message.content'),
                       'tool_calls', json_extract(body, '$.message.tool_calls'),
                       'finish_reason', json_extract_string(body, '$.finish_reason')
                   ) ORDER BY TRY_CAST(json_extract_string(body, '$.index') AS INTEGER), n)
                     FILTER (WHERE event_name = '{A.GEN_AI_CHOICE_EVENT}'))::VARCHAR AS output_messages
            FROM records WHERE event_name <> {_DETAILS} GROUP BY ALL
        )
        SELECT trace_id, span_id, input_messages, output_messages
        FROM (SELECT * FROM details UNION ALL SELECT * FROM per_message)
        QUALIFY row_number() OVER (PARTITION BY trace_id, span_id ORDER BY preference) = 1
        """
    )


def counts(con: duckdb.DuckDBPyConnection) -> dict[str, Any]:
    """GenAI content records read, the spans they gave messages, records naming no span, events of unknown names."""
    return {"logs": {
        "content_records": scalar(con, f"SELECT count(*) FROM log_records WHERE event_name IN {CONTENT_EVENTS}"),
        "spans_with_content": scalar(con, "SELECT count(*) FROM log_content"),
        "without_span": scalar(
            con, f"SELECT count(*) FROM log_records WHERE (span_id IS NULL OR trace_id IS NULL) AND event_name IN {CONTENT_EVENTS}"
        ),
        # GenAI events of a name no stage reads (a newer conventions version): by name
        "unknown_events": grouped(
            con, f"SELECT event_name, count(*) FROM log_records WHERE event_name NOT IN {KNOWN_EVENTS} GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 10"
        ),
    }}
