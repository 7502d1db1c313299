"""Every reward of an episode, from wherever it was recorded, in one ``rewards`` table.

Sources: ``tracerl.reward`` spans, ``tracerl.reward`` span events, the reward spans of
other conventions (:data:`tracerl.pipeline.layouts.REWARD_LAYOUTS`: agentlightning's),
late rewards (files keyed by episode id, trace id, response id or agentlightning rollout
id), the OpenTelemetry GenAI ``gen_ai.evaluation.result`` events of evaluators
(:func:`build_evaluations`) and the automatic intermediate rewards
of :mod:`tracerl.pipeline.air`. Each row has the time it refers to (``time_ns``; NULL
means "the end of the episode"), which is how it is later attached to a call.
"""

from __future__ import annotations

import re
from typing import Any

import duckdb

from tracerl.pipeline.counts import grouped, scalar
from tracerl.pipeline.layouts import REWARD_LAYOUTS, attribute_path
from tracerl.pipeline.sql_text import sql_str
from tracerl.schemas import attributes as A

# a secondary dimension of a multi-dimensional reward (agentlightning's emit_reward(dict)):
# like agentlightning, only the primary dimension counts unless --reward-weight names it
SECONDARY_SOURCE = "dimension"
EVALUATION_SOURCE = "evaluation"  # a gen_ai.evaluation.result event's score
OUTCOME_SOURCES = ("span", "event", "late", SECONDARY_SOURCE, EVALUATION_SOURCE)



def _field(key: str) -> str:
    """An evaluation event's attribute as text: from its attributes, else from a log record's body (older Events API users)."""
    return f"coalesce(json_extract_string(a, {attribute_path(key)}), json_extract_string(b, {attribute_path(key)}))"


def build_evaluations(con: duckdb.DuckDBPyConnection, enabled: bool = True, names: tuple[str, ...] = ()) -> None:
    """Table ``evaluations``: every ``gen_ai.evaluation.result`` event, where it is placed, and why it is not a reward.

    The event comes as a log record (the Logs/Events API; ``log_records``, the evaluated span's ids on
    the record) or as a span event on the evaluated span (``span_meta.reward_events``). It is placed on
    the call it evaluates: the LLM call whose span it is parented to, else the call whose response id
    it names (``gen_ai.response.id``: the conventions' fallback when the span id is not available),
    else the span it is parented to (an agent's or the episode's span: the last call ended by then),
    else its trace's episode (time NULL: the episode's end). ``skipped`` is NULL for an event that
    becomes a reward (``value``: its ``gen_ai.evaluation.score.value``, named by
    ``gen_ai.evaluation.name``), else the reason (:data:`tracerl.pipeline.counts.EVALUATION_CHOICES`, :data:`~tracerl.pipeline.counts.EVALUATION_PROBLEMS`).
    ``enabled`` and ``names`` are the build's ``evaluation_rewards`` and ``evaluations`` options.
    """
    event = sql_str(A.GEN_AI_EVALUATION_RESULT_EVENT)
    selected = f"v.name IN ({', '.join(sql_str(n) for n in names)})" if names else "true"
    # most builds have none: then the placing joins (scans of span_meta and llm_calls) are not run
    quoted = sql_str(f'"{A.GEN_AI_EVALUATION_RESULT_EVENT}"')
    found = scalar(con, f"""SELECT (SELECT count(*) FROM log_records WHERE event_name = {event})
                                 + (SELECT count(*) FROM span_meta WHERE contains(reward_events, {quoted}))""")
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE evaluations AS
        WITH raw AS (
            SELECT 'log' AS carrier, trace_id, span_id, time_unix_nano AS event_time_ns, scope_name,
                   CASE WHEN json_valid(attributes) THEN attributes END AS a, CASE WHEN json_valid(body) THEN body END AS b
            FROM log_records WHERE event_name = {event}
            UNION ALL
            SELECT 'span_event', trace_id, span_id, TRY_CAST(e->>'time_unix_nano' AS BIGINT), NULL,
                   (e->'attributes')::VARCHAR, NULL
            FROM (SELECT trace_id, span_id, unnest(from_json(reward_events, '["JSON"]')) AS e
                  FROM span_meta WHERE reward_events IS NOT NULL)
            WHERE e->>'name' = {event}
        ),
        f AS (
            SELECT carrier, trace_id, span_id, event_time_ns, scope_name,
                   {_field(A.GEN_AI_EVALUATION_NAME)} AS name,
                   {_field(A.GEN_AI_EVALUATION_SCORE_VALUE)} AS score,
                   {_field(A.GEN_AI_EVALUATION_SCORE_LABEL)} AS label,
                   {_field(A.ERROR_TYPE)} AS error_type,
                   {_field(A.GEN_AI_RESPONSE_ID)} AS response_id
            FROM raw
        ),
        v AS (
            SELECT *, CASE WHEN isfinite(TRY_CAST(score AS DOUBLE)) THEN TRY_CAST(score AS DOUBLE) END AS value FROM f
        ),
        trace_episode AS (  -- a trace of one episode names it (an event whose span is not in the spans read)
            SELECT trace_id, CASE WHEN count(DISTINCT episode_id) = 1 THEN min(episode_id) END AS episode_id
            FROM span_meta WHERE trace_id IN (SELECT trace_id FROM v) GROUP BY trace_id
        )
        SELECT coalesce(ck.episode_id, cs.episode_id, cr.episode_id, s.episode_id, t.episode_id) AS episode_id,
               coalesce(ck.end_ns, cs.end_ns, cr.end_ns, s.end_ns) AS time_ns,
               v.name, v.value, v.label,
               CASE WHEN v.scope_name = {sql_str(A.JUDGE_EVENTS_SCOPE)} THEN 'tracerl_judge'
                    WHEN NOT {'true' if enabled else 'false'} THEN 'off'
                    WHEN v.name IS NULL THEN 'no_name'
                    WHEN NOT ({selected}) THEN 'not_selected'
                    WHEN v.error_type IS NOT NULL THEN 'error'
                    WHEN v.score IS NULL AND v.label IS NOT NULL THEN 'label_only'
                    WHEN v.score IS NULL THEN 'no_score'
                    WHEN v.value IS NULL THEN 'not_a_number'
               END AS skipped,
               v.carrier, v.trace_id, v.span_id,
               coalesce(ck.response_id, cs.response_id, v.response_id) AS response_id, v.event_time_ns
        FROM v
        LEFT JOIN span_meta s ON s.trace_id = v.trace_id AND s.span_id = v.span_id
        -- parented to an LLM call: that call (its copies are merged by response id)
        LEFT JOIN llm_calls ck ON s.is_llm AND ck.response_id = s.response_id
        LEFT JOIN llm_calls cs ON s.is_llm AND s.response_id IS NULL AND cs.trace_id = s.trace_id AND cs.span_id = s.span_id
        -- naming a call's response id
        LEFT JOIN llm_calls cr ON cr.response_id = v.response_id
        LEFT JOIN trace_episode t ON t.trace_id = v.trace_id
        {"" if found else "LIMIT 0"}
        """
    )


def _foreign_rewards_sql() -> list[str]:
    """One SELECT per entry of REWARD_LAYOUTS: the rewards other conventions record on spans.

    A reward refers to the time its span started (agentlightning matches it to the last call
    that ended before that).
    """
    parts = []
    for layout in REWARD_LAYOUTS:
        where = "reward_attributes IS NOT NULL" + (f" AND name = {sql_str(layout.span_name)}" if layout.span_name else "")
        common = "episode_id, start_ns AS time_ns"
        origin = "trace_id AS origin_trace_id, span_id AS origin_span_id, NULL::VARCHAR AS response_id"
        if layout.form == "dimensions":
            prefix = layout.key + "."
            path_start = sql_str('$."' + prefix)  # the path '$."agentlightning.reward.' || n || '.value"'
            name_path = path_start + " || n || " + sql_str("." + A.AGENTLIGHTNING_REWARD_DIMENSION_NAME + '"')
            value_path = path_start + " || n || " + sql_str("." + A.AGENTLIGHTNING_REWARD_DIMENSION_VALUE + '"')
            value_key = re.escape(prefix) + r"(\d+)\." + re.escape(A.AGENTLIGHTNING_REWARD_DIMENSION_VALUE)
            parts.append(f"""
                SELECT {common},
                       coalesce(json_extract_string(reward_attributes, {name_path}), 'reward') AS name,
                       TRY_CAST(json_extract_string(reward_attributes, {value_path}) AS DOUBLE) AS value,
                       CASE WHEN n = '0' THEN 'span' ELSE '{SECONDARY_SOURCE}' END AS source, {origin}
                FROM (SELECT *, unnest(list_transform(
                          list_filter(json_keys(reward_attributes), lambda k: regexp_matches(k, {sql_str('^' + value_key + '$')})),
                          lambda k: regexp_extract(k, {sql_str(value_key)}, 1))) AS n
                      FROM span_meta WHERE {where})
            """)
        elif layout.form == "output":
            parts.append(f"""
                SELECT {common}, 'reward' AS name, TRY_CAST(o->>'value' AS DOUBLE) AS value, 'span' AS source, {origin}
                FROM (SELECT *, TRY_CAST(json_extract_string(reward_attributes, {attribute_path(layout.key)}) AS JSON) AS o
                      FROM span_meta WHERE {where})
                WHERE o->>'type' = '{A.AGENTLIGHTNING_REWARD_OUTPUT_TYPE}'
            """)
        else:
            parts.append(f"""
                SELECT {common}, 'reward' AS name, value, 'span' AS source, {origin}
                FROM (SELECT *, TRY_CAST(json_extract_string(reward_attributes, {attribute_path(layout.key)}) AS DOUBLE) AS value
                      FROM span_meta WHERE {where})
                WHERE value IS NOT NULL
            """)
    return parts


def build_rewards(con: duckdb.DuckDBPyConnection, air_sql: str | None, evaluation_rewards: bool = True,
                  evaluations: tuple[str, ...] = ()) -> None:
    """Tables ``evaluations`` (:func:`build_evaluations`) and ``rewards``; rows whose value or episode cannot be
    found keep a NULL there (counted later)."""
    build_evaluations(con, evaluation_rewards, evaluations)
    parts = [
        f"""
        SELECT episode_id, end_ns AS time_ns, coalesce(reward_name, 'reward') AS name, reward_value AS value,
               'span' AS source, trace_id AS origin_trace_id, span_id AS origin_span_id, NULL::VARCHAR AS response_id
        FROM span_meta WHERE name = '{A.REWARD_SPAN_NAME}'
        """,
        f"""
        SELECT episode_id, TRY_CAST(e->>'time_unix_nano' AS BIGINT) AS time_ns,
               coalesce(e->'attributes'->>'{A.REWARD_NAME}', 'reward') AS name,
               TRY_CAST(e->'attributes'->>'{A.REWARD_VALUE}' AS DOUBLE) AS value,
               'event' AS source, trace_id, span_id, NULL::VARCHAR
        FROM (
            SELECT episode_id, trace_id, span_id, unnest(from_json(reward_events, '["JSON"]')) AS e
            FROM span_meta
            -- a reward span may also carry its reward as an event: count it once
            WHERE reward_events IS NOT NULL AND name <> '{A.REWARD_SPAN_NAME}'
        ) WHERE e->>'name' = '{A.REWARD_EVENT_NAME}'
        """,
        """
        SELECT coalesce(l.episode_id::VARCHAR, rc.episode_id, te.episode_id, ro.episode_id) AS episode_id,
               rc.end_ns AS time_ns, coalesce(l.name::VARCHAR, 'reward') AS name,
               TRY_CAST(l.value AS DOUBLE) AS value, 'late' AS source,
               l.trace_id::VARCHAR, NULL::VARCHAR, l.response_id::VARCHAR
        FROM late_rewards l
        LEFT JOIN llm_calls rc ON l.response_id::VARCHAR = rc.response_id
        LEFT JOIN (SELECT trace_id, min(episode_id) AS episode_id FROM span_meta GROUP BY trace_id) te
               ON l.trace_id::VARCHAR = te.trace_id
        -- keyed by an agentlightning rollout: each of its attempts, or the one attempt_id names
        LEFT JOIN episodes ro ON l.rollout_id::VARCHAR = ro.rollout_id
               AND (l.attempt_id IS NULL OR l.attempt_id::VARCHAR = ro.attempt_id)
        """,
        f"""
        SELECT episode_id, time_ns, name, value, '{EVALUATION_SOURCE}' AS source, trace_id, span_id, response_id
        FROM evaluations WHERE skipped IS NULL
        """,
        *_foreign_rewards_sql(),
    ]
    if air_sql:
        parts.append(air_sql)
    con.execute("CREATE OR REPLACE TEMP TABLE rewards AS " + " UNION ALL ".join(f"({p})" for p in parts))
    # a late reward may name an episode the spans never mention: keep it, flagged
    con.execute(
        """
        UPDATE rewards SET episode_id = NULL
        WHERE source = 'late' AND episode_id IS NOT NULL
          AND episode_id NOT IN (SELECT episode_id FROM episodes)
        """
    )


def counts(con: duckdb.DuckDBPyConnection) -> dict[str, Any]:
    """Rewards by source and name, those without a value or an episode, and the evaluation events read and
    not taken as rewards, by reason."""
    return {"rewards": {
        "by_source": grouped(con, "SELECT source, count(*) FROM rewards GROUP BY 1 ORDER BY 1"),
        "by_name": grouped(con, "SELECT name, count(*) FROM rewards GROUP BY 1 ORDER BY 1"),
        "without_value": scalar(con, "SELECT count(*) FROM rewards WHERE value IS NULL"),
        "unmatched_episode": scalar(con, "SELECT count(*) FROM rewards WHERE episode_id IS NULL"),
        "evaluation_events": scalar(con, "SELECT count(*) FROM evaluations"),
        "evaluations_skipped": grouped(con, "SELECT skipped, count(*) FROM evaluations WHERE skipped IS NOT NULL GROUP BY 1 ORDER BY 1"),
    }}
