"""Credit assignment (episode return -> each call) and advantage estimation per task group.

:func:`choose_transitions` is the stage: it takes the policy calls of rewarded episodes
with their immediate rewards and leaves table ``chosen``, the rows the writer will write.
The arithmetic is one SQL query of window functions (:func:`credit_sql`) that DuckDB runs
where the calls are, within its memory limit (spilling beyond it): assigning credit in
Polars instead took the calls out of DuckDB and back, and at 4M calls held 2.6 GB
outside any limit (``benchmarks/pipeline_build.py --episodes 1000000``).
:func:`assign_credit` runs the same query over a table of calls, for tests and notebooks.

Input: one row per policy call with ``episode_id``, ``task_id``, ``step`` and its
immediate ``reward`` (outcome rewards attached to the call plus intermediate ones). The
credit rules (``identical``, ``discounted``) and advantage estimators (``grpo``, ``rloo``,
``batch``, ``none``) are rows of :mod:`~tracerl.pipeline.credit_rules`, each its SQL; this
query computes what they read. Advantages compare a call's return with the returns of the
*episodes* of the same task (the group; episodes without a task id form one group). Group
statistics count each episode once, whatever its number of calls, so long episodes do not
outweigh short ones in the baseline.

Every float sum is taken in a fixed order, so the same spans give the same rewards, returns
and advantages bit for bit, whatever ``--duckdb-threads`` (``tests/pipeline/test_deterministic_build.py``):
without one, DuckDB adds a parallel aggregate's or window aggregate's rows in the order its
threads reach them, and the last bit of a float sum follows that order (about 60% of GRPO's
advantages differed between two builds on 2 threads). ``sum(x ORDER BY key)`` is DuckDB's
sorted aggregate: it buffers each group's rows and sorts them before adding them into one state,
so the key must be unique among the rows summed (the step within an episode, the episode within
a group; an ORDER BY on the partition key itself would be dropped as redundant). The rewards
a call receives have no such key and are added in the order of their values. The discounted
return's list is ordered by its window (``ORDER BY step``) and folded in that order.
"""

from __future__ import annotations

from typing import Any

import duckdb
import pyarrow as pa

from tracerl.pipeline.counts import grouped, scalar
from tracerl.pipeline.credit_rules import advantage_sql, return_sql
from tracerl.pipeline.options import check_credit
from tracerl.pipeline.rewards import OUTCOME_SOURCES
from tracerl.pipeline.sql_text import sql_str
from tracerl.schemas import attributes as A


def credit_sql(calls: str, *, credit: str, gamma: float, advantage: str) -> str:
    """A query giving relation ``calls`` with ``return`` and ``advantage`` appended (columns in order, rows unordered).

    Group statistics take each episode once: its return is that of its first call. Sums and
    averages are ordered (by step, by episode): the result does not depend on DuckDB's threads.
    """
    check_credit(credit, gamma, advantage)
    return f"""
        WITH returned AS (SELECT *, {return_sql(credit, gamma)} AS "return" FROM {calls}),
        episode AS (
            SELECT episode_id, coalesce(arg_min(task_id, step), '') AS task_group, arg_min("return", step) AS episode_return
            FROM returned GROUP BY episode_id
        ),
        grouped AS (
            SELECT episode_id, episode_return,
                   avg(episode_return ORDER BY episode_id) OVER task AS group_mean,
                   coalesce(stddev_pop(episode_return ORDER BY episode_id) OVER task, 0) AS group_std,
                   sum(episode_return ORDER BY episode_id) OVER task AS group_sum,
                   count(*) OVER task AS group_size,
                   avg(episode_return ORDER BY episode_id) OVER () AS batch_mean
            FROM episode WINDOW task AS (PARTITION BY task_group)
        )
        SELECT returned.*, ({advantage_sql(advantage)})::DOUBLE AS advantage
        FROM returned JOIN grouped USING (episode_id)
    """


def assign_credit(calls: pa.Table, *, credit: str, gamma: float, advantage: str) -> pa.Table:
    """``calls`` with ``return`` and ``advantage`` columns added, sorted by episode and step."""
    query = credit_sql("calls", credit=credit, gamma=gamma, advantage=advantage)
    with duckdb.connect() as con:
        con.register("calls", calls)
        return con.sql(f"{query} ORDER BY episode_id, step").to_arrow_table()


def choose_transitions(
    con: duckdb.DuckDBPyConnection, *, credit: str, gamma: float, advantage: str, retokenize: bool = False,
) -> None:
    """Tables ``rewarded_episodes`` and ``chosen``: policy calls of rewarded episodes with token ids, credit assigned.

    An episode counts as rewarded when an outcome reward (not only AIR penalties) with a
    non-zero weight reached one of its policy calls. Calls without token ids take part in
    the credit of their episode (their step and reward count) but are not chosen, unless
    ``retokenize`` and their messages were captured (the writer rebuilds their ids).
    """
    outcome = ", ".join(sql_str(s) for s in OUTCOME_SOURCES)
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE rewarded_episodes AS
        SELECT DISTINCT episode_id FROM attached_rewards
        WHERE source IN ({outcome}) AND weight <> 0
        """
    )
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE chosen AS
        WITH calls AS (
            SELECT p.episode_id, p.task_id, p.split, p.agent_name, p.step, p.policy_version, p.policy_name, p.trace_id,
                   p.span_id, p.response_id, p.file_index, p.file_row, p.content_layout, p.has_tokens, p.status_code,
                   coalesce(r.reward, 0.0) AS reward
            FROM policy_calls p
            JOIN rewarded_episodes USING (episode_id)
            -- the rewards of one call have no key to order them by: added in the order of their values,
            -- they give the same sum whatever order they come in (equal values are interchangeable); a
            -- sorted list is half the time of sum(x ORDER BY x) here (4M calls: 1.3 s against 2.3 s)
            LEFT JOIN (SELECT episode_id, step, list_sum(list_sort(list(value * weight))) AS reward
                       FROM attached_rewards GROUP BY ALL) r
                USING (episode_id, step)
        )
        SELECT * EXCLUDE (status_code) FROM ({credit_sql("calls", credit=credit, gamma=gamma, advantage=advantage)})
        WHERE has_tokens OR ($retokenize AND content_layout IS NOT NULL AND coalesce(status_code, '') <> 'ERROR')
        """,
        {"retokenize": retokenize},
    )


def counts(con: duckdb.DuckDBPyConnection) -> dict[str, Any]:
    """Episodes and calls left without a transition (no reward, no token ids, failed), and what was chosen."""
    rewarded = "episode_id IN (SELECT episode_id FROM rewarded_episodes)"
    # a call that failed (error.type and the server's message on its span) is no call "without token ids"
    skipped = {
        "episode_no_reward": scalar(con, f"SELECT count(*) FROM policy_calls WHERE NOT {rewarded}"),
        "no_token_ids": scalar(
            con,
            f"SELECT count(*) FROM policy_calls WHERE NOT has_tokens AND coalesce(status_code, '') <> 'ERROR' AND {rewarded} "
            "AND (trace_id, span_id) NOT IN (SELECT (trace_id, span_id) FROM chosen)",  # --retokenize chooses some
        ),
        "failed": scalar(con, f"SELECT count(*) FROM policy_calls WHERE NOT has_tokens AND status_code = 'ERROR' AND {rewarded}"),
    }
    return {
        "episodes": {
            "truncated": scalar(con, "SELECT count(*) FROM episodes WHERE truncated AND episode_id IN (SELECT episode_id FROM chosen)"),
            "without_reward": scalar(con, f"SELECT count(DISTINCT episode_id) FROM policy_calls WHERE NOT {rewarded}"),
            # agentlightning's rollouts (ids or spans of its own) whose reward never reached the wire
            "agentlightning_without_reward": scalar(
                con,
                f"""SELECT count(DISTINCT p.episode_id) FROM policy_calls p JOIN episodes e USING (episode_id)
                    WHERE p.episode_id NOT IN (SELECT episode_id FROM rewarded_episodes)
                      AND (e.rollout_id IS NOT NULL OR p.episode_id IN (
                          SELECT episode_id FROM span_meta WHERE starts_with(name, {sql_str(A.AGENTLIGHTNING_SPAN_NAME_PREFIX)})))""",
            ),
            "emitted": scalar(con, "SELECT count(DISTINCT episode_id) FROM chosen"),
        },
        "llm_calls": {
            "skipped": {reason: n for reason, n in skipped.items() if n},
            "failed_messages": grouped(
                con,
                "SELECT coalesce(m.status_message, '(no message)'), count(*) FROM policy_calls p JOIN span_meta m USING (trace_id, span_id) "
                "WHERE NOT p.has_tokens AND p.status_code = 'ERROR' GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 5",
            ),
        },
        "transitions": scalar(con, "SELECT count(*) FROM chosen"),
        "task_groups": _task_groups(con),
    }


def _task_groups(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """The task groups of the chosen episodes (episodes without a task id are one group), and
    those of one episode, which a group advantage (GRPO, RLOO) can only give 0."""
    total, single, single_transitions = con.execute(
        """SELECT count(*), count(*) FILTER (WHERE episodes = 1), coalesce(sum(transitions) FILTER (WHERE episodes = 1), 0)
           FROM (SELECT count(DISTINCT episode_id) AS episodes, count(*) AS transitions
                 FROM chosen GROUP BY coalesce(task_id, ''))"""
    ).fetchall()[0]
    return {"total": int(total), "single_episode": int(single), "single_episode_transitions": int(single_transitions)}
