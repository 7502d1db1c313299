"""Episodes: which spans belong together, what task they ran, and whether they are over.

An episode is identified by ``tracerl.episode.id``, else an agentlightning rollout's
attempt (``ROLLOUT:ATTEMPT``, :data:`tracerl.pipeline.layouts.EPISODE_LAYOUTS`), else its
trace id. It is
*finished* once its ``tracerl.episode`` span, or a root span, has been exported: OTel
exports a span only when it ends, and those spans end last. An unfinished episode is
*pending* (held back, the next run picks it up) until nothing has happened in it for
``timeout_s``; then it is processed but counted as *truncated*. Time is the data's own
clock (the latest span end seen), so the same input always gives the same decision.
"""

from __future__ import annotations

from typing import Any

import duckdb

from tracerl.pipeline.counts import grouped, scalar
from tracerl.schemas import attributes as A


def build_episodes(con: duckdb.DuckDBPyConnection, timeout_s: float, clock_ns: int | None = None) -> None:
    """Table ``episodes`` with task, split, bounds, finished/pending/truncated flags.

    ``clock_ns``: the data's clock when the spans read are a part of the data (a bucket of a
    distributed build): every part must decide pending or stale on the same clock, the whole's.
    """
    timeout_ns = int(timeout_s * 1e9)
    clock = f"(SELECT {int(clock_ns)}::BIGINT AS now_ns)" if clock_ns is not None else "(SELECT max(end_ns) AS now_ns FROM span_meta)"
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE episodes AS
        WITH e AS (
            SELECT episode_id,
                coalesce(max(task_id) FILTER (WHERE name = '{A.EPISODE_SPAN_NAME}'), max(task_id)) AS task_id,
                coalesce(max(split) FILTER (WHERE name = '{A.EPISODE_SPAN_NAME}'), max(split)) AS split,
                max(rollout_id) AS rollout_id, max(attempt_id) AS attempt_id,
                bool_or(name = '{A.EPISODE_SPAN_NAME}' OR parent_span_id IS NULL) AS finished,
                min(start_ns) AS start_ns, max(end_ns) AS end_ns,
                count(*) AS n_spans, count(*) FILTER (WHERE is_llm) AS n_llm_spans
            FROM span_meta GROUP BY episode_id
        ),
        clock AS {clock}
        SELECT e.*,
            NOT e.finished AND e.end_ns > clock.now_ns - {timeout_ns} AS pending,
            NOT e.finished AND e.end_ns <= clock.now_ns - {timeout_ns} AS truncated
        FROM e, clock
        """
    )


def counts(con: duckdb.DuckDBPyConnection) -> dict[str, Any]:
    """Episodes found, finished, still pending, and those without any LLM call."""
    return {"episodes": {
        "total": scalar(con, "SELECT count(*) FROM episodes"),
        "finished": scalar(con, "SELECT count(*) FROM episodes WHERE finished"),
        "pending": scalar(con, "SELECT count(*) FROM episodes WHERE pending"),
        "without_llm_calls": scalar(con, "SELECT count(*) FROM episodes WHERE episode_id NOT IN (SELECT episode_id FROM llm_calls)"),
    }}
