"""The credit rules and advantage estimators, one table row each: a name and its SQL.

A rule is added by adding its row: ``--credit`` and ``--advantage`` take their choices from
these tables (``CREDITS`` and ``ADVANTAGES`` in :mod:`tracerl.pipeline.options` are their
keys), and :func:`~tracerl.pipeline.credit.credit_sql` puts the row's SQL into its query. A
name no row has is refused, naming those that exist, never replaced by another rule.
Kept apart from :mod:`~tracerl.pipeline.credit` (the stage that runs them) because the
options module reads the names and the stage reads the options.

Returns (``RETURN_SQL``, a window expression over one row per policy call with
``episode_id``, ``step`` and its immediate ``reward``; ``gamma`` is ``--gamma``):

- ``identical`` (the paper): every call's return is the episode's total reward.
- ``discounted``: ``G_t = r_t + gamma * G_{t+1}`` over the calls of the episode, so an
  intermediate penalty weighs most on the call that caused it. Each call folds the rewards
  of the calls after it, last first, in the same order as that recursion (exact, no
  powers of gamma that could underflow); the work grows with the square of an episode's
  length, a million operations for a 1,000-call episode.

Advantages (``ADVANTAGE_SQL``, an expression over a call's ``"return"`` and its episode's
statistics: ``episode_return``; over the episodes of its task group ``group_mean``,
``group_std`` (population), ``group_sum``, ``group_size``; over every episode ``batch_mean``):

- ``grpo``: ``(G_t - mean) / std`` (when the std is 0 only the mean is removed);
- ``rloo``: ``G_t - mean of the other episodes' returns`` (a lone episode is its own baseline);
- ``batch``: ``G_t - mean`` over every episode of the build, whatever its task: a baseline for
  data with one episode per task, where a task group of one gives GRPO and RLOO nothing to
  compare with (their advantages are all 0; ``counts.warnings`` says so);
- ``none``: ``G_t``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypeVar

from tracerl.pipeline.source import PipelineInputError

_STD_FLOOR = 1e-8  # a group std at or below it counts as 0: GRPO removes the mean only


def _discounted(gamma: float) -> str:
    # the rewards from this call to the episode's end, folded last first: G = r + gamma * G
    later = "list(reward) OVER (PARTITION BY episode_id ORDER BY step ROWS BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING)"
    return f"list_reduce(list_reverse({later}), lambda g, r: r + {float(gamma)!r} * g)"


# credit rule -> the SQL of a call's return, given gamma; the first is the default
RETURN_SQL: dict[str, Callable[[float], str]] = {
    "identical": lambda gamma: "sum(reward ORDER BY step) OVER (PARTITION BY episode_id)",
    "discounted": _discounted,
}

# advantage estimator -> the SQL of a call's advantage; the first is the default
ADVANTAGE_SQL: dict[str, str] = {
    "grpo": f"CASE WHEN group_std > {_STD_FLOOR} THEN (\"return\" - group_mean) / group_std ELSE \"return\" - group_mean END",
    "rloo": "\"return\" - CASE WHEN group_size > 1 THEN (group_sum - episode_return) / (group_size - 1) ELSE episode_return END",
    "batch": "\"return\" - batch_mean",
    "none": "\"return\"",
}

_Row = TypeVar("_Row")


def _row(table: Mapping[str, _Row], kind: str, name: str) -> _Row:
    if name not in table:
        raise PipelineInputError(f"unknown {kind} {name!r}: use {' or '.join(table)}")
    return table[name]


def return_sql(credit: str, gamma: float) -> str:
    """The return of credit rule ``credit``; raises :class:`PipelineInputError` naming the rules for another name."""
    return _row(RETURN_SQL, "credit rule", credit)(gamma)


def advantage_sql(advantage: str) -> str:
    """The advantage of estimator ``advantage``; raises :class:`PipelineInputError` naming the estimators for another name."""
    return _row(ADVANTAGE_SQL, "advantage", advantage)
