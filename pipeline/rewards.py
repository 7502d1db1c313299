"""Every reward of an episode, from wherever it was recorded, in one ``rewards`` table.

Sources: ``tracerl.reward`` spans, ``tracerl.reward`` span events, late rewards (files
keyed by episode id, trace id or response id) and the automatic intermediate rewards
of :mod:`tracerl.pipeline.air`. Each row has the time it refers to (``time_ns``; NULL
means "the end of the episode"), which is how it is later attached to a call.
"""

from __future__ import annotations

import duckdb

from tracerl.schemas import attributes as A

OUTCOME_SOURCES = ("span", "event", "late")


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
        SELECT coalesce(l.episode_id::VARCHAR, rc.episode_id, te.episode_id) AS episode_id,
               rc.end_ns AS time_ns, coalesce(l.name::VARCHAR, 'reward') AS name,
               TRY_CAST(l.value AS DOUBLE) AS value, 'late' AS source,
               l.trace_id::VARCHAR, NULL::VARCHAR, l.response_id::VARCHAR
        FROM late_rewards l
        LEFT JOIN llm_calls rc ON l.response_id::VARCHAR = rc.response_id
        LEFT JOIN (SELECT trace_id, min(episode_id) AS episode_id FROM span_meta GROUP BY trace_id) te
               ON l.trace_id::VARCHAR = te.trace_id
        """,
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
