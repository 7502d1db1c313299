"""The reward a round's row reports per split: the mean over episodes of each one's summed rewards."""

from __future__ import annotations

import pytest

from tracerl.orchestration.local.run import mean_rewards_by_split
from tracerl.schemas import attributes as A
from tracerl_testing.span_builders import span, write_spans


def reward(episode: str, span_id: str, value: float, name: str, split: str) -> dict:
    return span(episode, span_id, A.REWARD_SPAN_NAME, 50, 50, attrs={A.REWARD_VALUE: value, A.REWARD_NAME: name, A.SPLIT: split})


def test_an_episode_that_emits_two_rewards_counts_once_with_their_sum(tmp_path):
    write_spans(tmp_path, [
        reward("a", "r1", 0.0, "execution_match", "train"), reward("a", "r2", 0.5, "schema_link", "train"),  # 0.5
        reward("b", "r1", 1.0, "execution_match", "train"),                                                   # 1.0
        reward("c", "r1", 0.0, "execution_match", "test"), reward("c", "r2", 0.25, "schema_link", "test"),   # 0.25
    ])
    assert mean_rewards_by_split(tmp_path) == {"train": pytest.approx(0.75), "test": pytest.approx(0.25)}


def test_a_primary_measure_counts_held_out_episodes_whose_named_reward_was_reached_partial_credit_aside(tmp_path):
    from tracerl.orchestration.local.recipe import reward_reached

    write_spans(tmp_path, [
        reward("a", "r1", 0.0, "execution_match", "test"), reward("a", "r2", 0.5, "schema_link", "test"),  # partial credit only
        reward("b", "r1", 1.0, "execution_match", "test"),
        reward("c", "r1", 1.0, "execution_match", "train"),  # training episodes are not held out
        reward("d", "r2", 1.0, "schema_link", "test"),  # another reward at 1 is not the measure
    ])
    measure = reward_reached("execution_match", "the query returns the gold's rows")(tmp_path)
    assert (measure.shown, measure.episodes, measure.what) == (1, 3, "the query returns the gold's rows")
