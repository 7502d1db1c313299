"""Which LLM calls are the policy's transitions, and which rewards each of them receives.

Every LLM call either becomes a policy call or gets one exclusion reason (first match
wins, so counts add up): a judge's call (``tracerl pipeline judge``), already processed by an earlier incremental run, episode still
running, split filter, agent filter, served by another policy than its agent's, policy-version filter. Rewards are attached to the
last *policy* call that ended at or before the reward's time (a reward with no time,
such as a late reward, goes to the episode's last call; one before any call ended goes
to the first), after the named-reward weights are applied.
"""

from __future__ import annotations

import re
from typing import Any

import duckdb

from tracerl.pipeline.counts import grouped, scalar
from tracerl.pipeline.rewards import OUTCOME_SOURCES, SECONDARY_SOURCE
from tracerl.pipeline.source import PipelineInputError
from tracerl.pipeline.sql_text import sql_str
from tracerl.schemas import attributes as A

_VERSION_SPEC = re.compile(r"^\s*(>=|<=|>|<|==)?\s*(\d+)\s*$")


def policy_version_predicate(spec: str | None) -> str:
    """SQL predicate on ``policy_version`` for a spec like ``3``, ``3,4`` or ``>=3``."""
    if not spec:
        return "true"
    terms = []
    for part in spec.split(","):
        match = _VERSION_SPEC.match(part)
        if not match:
            raise PipelineInputError(
                f"--policy-versions {spec!r}: use versions and comparisons separated by commas, e.g. '3,4' or '>=3'"
            )
        op = match.group(1) or "="
        terms.append(f"policy_version {'=' if op == '==' else op} {int(match.group(2))}")
    return "(" + " OR ".join(terms) + ")"


def select_policy_calls(
    con: duckdb.DuckDBPyConnection, *, agents: str | None, splits: tuple[str, ...], policy_versions: str | None,
    policies: dict[str, tuple[str, ...]] | None = None,
) -> None:
    """Tables ``call_status`` (every call, with its exclusion reason) and ``policy_calls`` (with steps).

    With ``policies`` ({policy: agents}), a call is its agent's policy's only when that policy
    served it (``policy_name``): a call routed to another model is ``wrong_policy``, never
    trained on, so one policy's update never uses tokens another policy sampled.
    """
    if agents:
        try:
            re.compile(agents)
        except re.error as exc:
            raise PipelineInputError(f"--agents {agents!r} is not a valid regular expression: {exc}") from exc
    agent_ok = f"coalesce(regexp_matches(c.agent_name, {sql_str(agents)}), false)" if agents else "true"
    split_ok = f"e.split IN ({', '.join(sql_str(s) for s in splits)})" if splits else "true"
    version_ok = policy_version_predicate(policy_versions).replace("policy_version", "c.policy_version")
    owner = {agent: name for name, members in (policies or {}).items() for agent in members}
    if owner:
        cases = " ".join(f"WHEN {sql_str(agent)} THEN {sql_str(name)}" for agent, name in owner.items())
        agent_ok = f"c.agent_name IN ({', '.join(sql_str(a) for a in owner)})"
        policy_ok = f"c.policy_name IS NOT DISTINCT FROM (CASE c.agent_name {cases} END)"
    else:
        policy_ok = "true"
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE call_status AS
        SELECT c.*, e.task_id, e.split, e.truncated,
            CASE
                WHEN c.agent_name IS NOT DISTINCT FROM {sql_str(A.JUDGE_AGENT)} THEN 'judge_call'
                WHEN p.episode_id IS NOT NULL THEN 'already_processed'
                WHEN e.pending THEN 'episode_pending'
                WHEN NOT coalesce({split_ok}, false) THEN 'split_filter'
                WHEN NOT coalesce({agent_ok}, false) THEN 'agent_filter'
                WHEN NOT {policy_ok} THEN 'wrong_policy'
                WHEN NOT coalesce({version_ok}, false) THEN 'policy_version_filter'
            END AS excluded
        FROM llm_calls c JOIN episodes e USING (episode_id)
        LEFT JOIN processed p USING (episode_id)
        """
    )
    con.execute(
        """
        CREATE OR REPLACE TEMP TABLE policy_calls AS
        SELECT *, (row_number() OVER (PARTITION BY episode_id ORDER BY start_ns, end_ns, span_id) - 1) AS step
        FROM call_status WHERE excluded IS NULL
        """
    )


def attach_rewards(con: duckdb.DuckDBPyConnection, weights: dict[str, float] | None) -> None:
    """Table ``attached_rewards``: each reward with its weight and the step of the call that receives it.

    With ``weights``, outcome rewards whose name is not listed get weight 0 (counted as
    ignored); intermediate (AIR) rewards keep their rule's value. A secondary dimension of a
    multi-dimensional reward has weight 0 unless ``weights`` names it.
    """
    con.execute("CREATE OR REPLACE TEMP TABLE reward_weights (name VARCHAR, weight DOUBLE)")
    if weights:
        con.executemany("INSERT INTO reward_weights VALUES (?, ?)", list(weights.items()))
    default_weight = "0.0" if weights else "1.0"
    outcome = ", ".join(sql_str(s) for s in OUTCOME_SOURCES)
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE attached_rewards AS
        WITH w AS (
            SELECT r.*, CASE WHEN r.source = {sql_str(SECONDARY_SOURCE)} THEN coalesce(rw.weight, 0.0)
                             WHEN r.source IN ({outcome}) THEN coalesce(rw.weight, {default_weight}) ELSE 1.0 END AS weight
            FROM rewards r LEFT JOIN reward_weights rw USING (name)
            WHERE r.value IS NOT NULL AND r.episode_id IS NOT NULL
        ),
        last AS (SELECT episode_id, max(step) AS last_step FROM policy_calls GROUP BY episode_id)
        SELECT w.*, CASE WHEN w.time_ns IS NULL THEN last.last_step ELSE coalesce(a.step, 0) END AS step
        FROM w
        JOIN last USING (episode_id)
        ASOF LEFT JOIN (SELECT episode_id, end_ns, step FROM policy_calls) a
            ON w.episode_id = a.episode_id AND w.time_ns >= a.end_ns
        """
    )


def counts(con: duckdb.DuckDBPyConnection, policies: dict[str, tuple[str, ...]]) -> dict[str, Any]:
    """Calls left out and why, the policy calls, calls routed to the wrong policy, rewards no policy call receives."""
    return {
        "episodes": {"with_policy_calls": scalar(con, "SELECT count(DISTINCT episode_id) FROM policy_calls")},
        "llm_calls": {
            "policy_calls": scalar(con, "SELECT count(*) FROM policy_calls"),
            "skipped": grouped(con, "SELECT excluded, count(*) FROM call_status WHERE excluded IS NOT NULL GROUP BY 1"),
            # calls a --policy agent made that another model served: "agent -> served (expected)": calls
            "wrong_policy": grouped(
                con,
                "SELECT agent_name || ' -> ' || coalesce(policy_name, '(none)'), count(*) FROM call_status "
                "WHERE excluded = 'wrong_policy' GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 10",
            ),
            "policy_agents_unseen": _unseen_agents(con, policies),
        },
        "rewards": {
            "episode_without_policy_calls": scalar(
                con,
                "SELECT count(*) FROM rewards WHERE value IS NOT NULL AND episode_id IS NOT NULL "
                "AND episode_id NOT IN (SELECT episode_id FROM policy_calls)",
            ),
            "ignored_by_weights": scalar(con, "SELECT count(*) FROM attached_rewards WHERE weight = 0"),
        },
    }


def _unseen_agents(con: duckdb.DuckDBPyConnection, policies: dict[str, tuple[str, ...]]) -> dict[str, list[str]]:
    """Each policy's agents that made no call (a misspelt name, or an agent that has not run yet)."""
    if not policies:
        return {}
    seen = {row[0] for row in con.execute("SELECT DISTINCT agent_name FROM llm_calls WHERE agent_name IS NOT NULL").fetchall()}
    return {name: missing for name, agents in policies.items() if (missing := [a for a in agents if a not in seen])}
