"""Credit assignment (episode return -> each call) and advantage estimation per task group.

:func:`choose_transitions` is the stage: it takes the policy calls of rewarded episodes
with their immediate rewards from DuckDB, assigns credit in Polars (the per-call table
is light: no tokens, no text) and leaves table ``chosen``, the rows the writer will
write. :func:`assign_credit` is the arithmetic.

Input of :func:`assign_credit`: one row per policy call with ``episode_id``, ``task_id``, ``step`` and its
immediate ``reward`` (outcome rewards attached to the call plus intermediate ones).

- ``identical`` (the paper): every call's return is the episode's total reward.
- ``discounted``: ``G_t = r_t + gamma * G_{t+1}`` over the calls of the episode, so an
  intermediate penalty weighs most on the call that caused it.

Advantages compare a call's return with the returns of the *episodes* of the same task
(the group; episodes without a task id form one group). Group statistics count each
episode once, whatever its number of calls, so long episodes do not outweigh short
ones in the baseline:

- ``grpo``: ``(G_t - mean) / std`` (population std; when the std is 0 only the mean is removed);
- ``rloo``: ``G_t - mean of the other episodes' returns`` (a lone episode is its own baseline);
- ``batch``: ``G_t - mean`` over every episode of the build, whatever its task: a baseline for
  data with one episode per task, where a task group of one gives GRPO and RLOO nothing to
  compare with (their advantages are all 0; ``counts.warnings`` says so);
- ``none``: ``G_t``.
"""

from __future__ import annotations

import duckdb
import numpy as np
import polars as pl

from tracerl.pipeline.options import check_credit
from tracerl.pipeline.rewards import OUTCOME_SOURCES
from tracerl.pipeline.sql_text import sql_str

_STD_FLOOR = 1e-8


def discounted_returns(episode_codes: np.ndarray, rewards: np.ndarray, gamma: float) -> np.ndarray:
    """Reverse discounted sums within runs of equal ``episode_codes`` (rows sorted by episode, step)."""
    out = np.empty_like(rewards, dtype=np.float64)
    running = 0.0
    for i in range(len(rewards) - 1, -1, -1):
        if i == len(rewards) - 1 or episode_codes[i] != episode_codes[i + 1]:
            running = 0.0
        running = rewards[i] + gamma * running
        out[i] = running
    return out


def assign_credit(calls: pl.DataFrame, *, credit: str, gamma: float, advantage: str) -> pl.DataFrame:
    """``calls`` with ``return`` and ``advantage`` columns added, sorted by episode and step."""
    check_credit(credit, gamma, advantage)
    df = calls.sort("episode_id", "step")
    if credit == "identical":
        df = df.with_columns(pl.col("reward").sum().over("episode_id").alias("return"))
    else:
        codes = df["episode_id"].cast(pl.Categorical).to_physical().to_numpy()
        returns = discounted_returns(codes, df["reward"].to_numpy().astype(np.float64), gamma)
        df = df.with_columns(pl.Series("return", returns))
    group = pl.col("task_id").fill_null("")
    episodes = (
        df.group_by("episode_id", maintain_order=True)
        .agg(pl.col("task_id").first(), pl.col("return").first().alias("episode_return"))
        .with_columns(
            pl.col("episode_return").mean().over(group).alias("group_mean"),
            pl.col("episode_return").std(ddof=0).over(group).fill_null(0.0).alias("group_std"),
            pl.col("episode_return").sum().over(group).alias("group_sum"),
            pl.len().over(group).alias("group_size"),
            pl.col("episode_return").mean().alias("batch_mean"),
        )
    )
    df = df.join(episodes.drop("task_id"), on="episode_id", how="left", maintain_order="left")
    g = pl.col("return")
    if advantage == "grpo":
        adv = pl.when(pl.col("group_std") > _STD_FLOOR).then(
            (g - pl.col("group_mean")) / pl.col("group_std")
        ).otherwise(g - pl.col("group_mean"))
    elif advantage == "rloo":
        others = (pl.col("group_sum") - pl.col("episode_return")) / (pl.col("group_size") - 1)
        baseline = pl.when(pl.col("group_size") > 1).then(others).otherwise(pl.col("episode_return"))
        adv = g - baseline
    elif advantage == "batch":
        adv = g - pl.col("batch_mean")
    else:
        adv = g
    return df.with_columns(adv.cast(pl.Float64).alias("advantage")).drop(
        "episode_return", "group_mean", "group_std", "group_sum", "group_size", "batch_mean"
    )


def choose_transitions(con: duckdb.DuckDBPyConnection, *, credit: str, gamma: float, advantage: str) -> None:
    """Tables ``rewarded_episodes`` and ``chosen``: policy calls of rewarded episodes with token ids, credit assigned.

    An episode counts as rewarded when an outcome reward (not only AIR penalties) with a
    non-zero weight reached one of its policy calls. Calls without token ids take part in
    the credit of their episode (their step and reward count) but are not chosen.
    """
    outcome = ", ".join(sql_str(s) for s in OUTCOME_SOURCES)
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE rewarded_episodes AS
        SELECT DISTINCT episode_id FROM attached_rewards
        WHERE source IN ({outcome}) AND weight <> 0
        """
    )
    calls = con.sql(
        """
        SELECT p.episode_id, p.task_id, p.split, p.agent_name, p.step, p.policy_version, p.policy_name, p.trace_id, p.span_id,
               p.response_id, p.file_index, p.file_row, p.content_layout, p.has_tokens,
               coalesce(r.reward, 0.0) AS reward
        FROM policy_calls p
        JOIN rewarded_episodes USING (episode_id)
        LEFT JOIN (SELECT episode_id, step, sum(value * weight) AS reward FROM attached_rewards GROUP BY ALL) r
            USING (episode_id, step)
        """
    ).pl()
    if calls.is_empty():
        calls = calls.with_columns(pl.lit(None, pl.Float64).alias("return"), pl.lit(None, pl.Float64).alias("advantage"))
    else:
        calls = assign_credit(calls, credit=credit, gamma=gamma, advantage=advantage)
    con.register("credited", calls.to_arrow())
    try:
        con.execute("CREATE OR REPLACE TEMP TABLE chosen AS SELECT * FROM credited WHERE has_tokens")
    finally:
        con.unregister("credited")
