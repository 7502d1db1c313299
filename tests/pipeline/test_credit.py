"""Credit assignment and advantage estimators, worked out by hand."""

from __future__ import annotations

import statistics

import pyarrow as pa
import pytest

from tracerl.pipeline.credit import assign_credit
from tracerl.pipeline.credit_rules import advantage_sql, return_sql


def _calls(rows: list[tuple[str, str | None, int, float]]) -> pa.Table:
    names = ("episode_id", "task_id", "step", "reward")
    return pa.Table.from_pylist([dict(zip(names, row, strict=True)) for row in rows],
                                schema=pa.schema([("episode_id", pa.string()), ("task_id", pa.string()),
                                                  ("step", pa.int64()), ("reward", pa.float64())]))


# task a: episode a1 has two calls (rewards 0, 1), a2 one call (reward 0), a3 one call (reward 0.5)
CALLS = [("a1", "a", 0, 0.0), ("a1", "a", 1, 1.0), ("a2", "a", 0, 0.0), ("a3", "a", 0, 0.5)]


def _column(table: pa.Table, name: str) -> list[float]:
    return table.sort_by([("episode_id", "ascending"), ("step", "ascending")]).column(name).to_pylist()


def test_identical_credit_gives_every_call_the_episode_return():
    df = assign_credit(_calls(CALLS), credit="identical", gamma=1.0, advantage="none")
    assert _column(df, "return") == [1.0, 1.0, 0.0, 0.5]
    assert _column(df, "advantage") == [1.0, 1.0, 0.0, 0.5]


def test_grpo_counts_each_episode_once_in_the_group_statistics():
    # episode returns 1, 0, 0.5: mean 0.5, population std sqrt(1/6); a1's two calls do not
    # weigh twice in the mean
    df = assign_credit(_calls(CALLS), credit="identical", gamma=1.0, advantage="grpo")
    std = (1 / 6) ** 0.5
    assert _column(df, "advantage") == pytest.approx([0.5 / std, 0.5 / std, -0.5 / std, 0.0])


def test_rloo_baseline_is_the_mean_of_the_other_episodes():
    df = assign_credit(_calls(CALLS), credit="identical", gamma=1.0, advantage="rloo")
    assert _column(df, "advantage") == pytest.approx([1 - 0.25, 1 - 0.25, 0 - 0.75, 0.5 - 0.5])


def test_discounted_returns_and_grpo_on_episode_returns():
    # a1: G1 = 1, G0 = 0 + 0.9 * 1 = 0.9; a2: 0; a3: 0.5. Group stats on G0: 0.9, 0, 0.5
    df = assign_credit(_calls(CALLS), credit="discounted", gamma=0.9, advantage="grpo")
    assert _column(df, "return") == pytest.approx([0.9, 1.0, 0.0, 0.5])
    mean, std = 1.4 / 3, statistics.pstdev([0.9, 0.0, 0.5])
    assert _column(df, "advantage") == pytest.approx([(g - mean) / std for g in (0.9, 1.0, 0.0, 0.5)])


def test_equal_returns_and_lone_episodes_get_zero_advantage():
    calls = [("x1", "x", 0, 1.0), ("x2", "x", 0, 1.0), ("solo", "y", 0, 1.0)]
    for advantage in ("grpo", "rloo"):
        df = assign_credit(_calls(calls), credit="identical", gamma=1.0, advantage=advantage)
        assert _column(df, "advantage") == [0.0, 0.0, 0.0]


def test_batch_baseline_is_the_mean_return_of_all_episodes_whatever_their_task():
    # one episode per task: GRPO and RLOO give 0 (above); batch compares with the mean of the
    # episode returns 1, 0, 0.5 (a1's two calls count once) = 0.5
    calls = [("a1", "a", 0, 0.0), ("a1", "a", 1, 1.0), ("b1", "b", 0, 0.0), ("c1", "c", 0, 0.5)]
    df = assign_credit(_calls(calls), credit="identical", gamma=1.0, advantage="batch")
    assert _column(df, "advantage") == pytest.approx([0.5, 0.5, -0.5, 0.0])


def test_episodes_without_a_task_form_one_group():
    calls = [("n1", None, 0, 1.0), ("n2", None, 0, 0.0)]
    df = assign_credit(_calls(calls), credit="identical", gamma=1.0, advantage="rloo")
    assert _column(df, "advantage") == [1.0, -1.0]


def test_discounted_returns_fold_long_episodes_exactly():
    # 2,000 calls at gamma 0.5: gamma ** step underflows long before the end, the fold does not
    rewards = [1.0 if step % 7 == 0 else -0.25 for step in range(2000)]
    table = assign_credit(_calls([("long", "t", step, r) for step, r in enumerate(rewards)]), credit="discounted", gamma=0.5,
                          advantage="none")
    expected, running = [], 0.0
    for r in reversed(rewards):
        running = r + 0.5 * running
        expected.append(running)
    assert _column(table, "return") == expected[::-1]


def test_bad_parameters_are_rejected():
    with pytest.raises(ValueError, match="credit must be one of"):
        assign_credit(_calls(CALLS), credit="magic", gamma=1.0, advantage="grpo")
    with pytest.raises(ValueError, match="gamma must be in"):
        assign_credit(_calls(CALLS), credit="discounted", gamma=1.5, advantage="grpo")


def test_a_rule_no_row_has_is_refused_naming_the_rules():
    """Each rule is a row of SQL; a name without one never falls back to another rule."""
    with pytest.raises(ValueError, match="unknown credit rule 'gae': use identical or discounted"):
        return_sql("gae", 0.9)
    with pytest.raises(ValueError, match="unknown advantage 'ppo': use grpo or rloo or batch or none"):
        advantage_sql("ppo")
