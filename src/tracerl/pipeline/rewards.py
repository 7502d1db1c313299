"""Every reward of an episode, from wherever it was recorded, in one ``rewards`` table.

Sources: ``tracerl.reward`` spans, ``tracerl.reward`` span events, the reward spans of
other conventions (:data:`tracerl.pipeline.layouts.REWARD_LAYOUTS`: agentlightning's),
late rewards (files keyed by episode id, trace id, response id or agentlightning rollout
id) and the automatic intermediate rewards
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
OUTCOME_SOURCES = ("span", "event", "late", SECONDARY_SOURCE)


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


def build_rewards(con: duckdb.DuckDBPyConnection, air_sql: str | None) -> None:
    """Table ``rewards``; rows whose value or episode cannot be found keep a NULL there (counted later)."""
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
    """Rewards by source and name, and those without a value or an episode."""
    return {"rewards": {
        "by_source": grouped(con, "SELECT source, count(*) FROM rewards GROUP BY 1 ORDER BY 1"),
        "by_name": grouped(con, "SELECT name, count(*) FROM rewards GROUP BY 1 ORDER BY 1"),
        "without_value": scalar(con, "SELECT count(*) FROM rewards WHERE value IS NULL"),
        "unmatched_episode": scalar(con, "SELECT count(*) FROM rewards WHERE episode_id IS NULL"),
    }}
