"""The reward a round's row reports per split: the mean over episodes of each one's summed rewards; and the
spans behind it and the round's generated tokens are the ones the build reads, whatever the folder holds."""

from __future__ import annotations

import pytest

from tracerl.orchestration.local.run import mean_rewards_by_split, round_spans
from tracerl.schemas import attributes as A
from tracerl_testing.span_builders import chat_episode, span, write_spans


def reward(episode: str, span_id: str, value: float, name: str, split: str) -> dict:
    return span(episode, span_id, A.REWARD_SPAN_NAME, 50, 50, attrs={A.REWARD_VALUE: value, A.REWARD_NAME: name, A.SPLIT: split})


def test_an_episode_that_emits_two_rewards_counts_once_with_their_sum(tmp_path):
    write_spans(tmp_path, [
        reward("a", "r1", 0.0, "execution_match", "train"), reward("a", "r2", 0.5, "schema_link", "train"),  # 0.5
        reward("b", "r1", 1.0, "execution_match", "train"),                                                   # 1.0
        reward("c", "r1", 0.0, "execution_match", "test"), reward("c", "r2", 0.25, "schema_link", "test"),   # 0.25
    ])
    assert mean_rewards_by_split(tmp_path) == {"train": pytest.approx(0.75), "test": pytest.approx(0.25)}


def test_a_compacted_partition_and_a_hidden_copy_are_read_as_the_build_reads_them(tmp_path):
    import shutil

    import duckdb

    from tracerl.collector.compaction import CompactionSettings, compact

    write_spans(tmp_path, chat_episode("a", reward=1.0))
    write_spans(tmp_path, chat_episode("b", reward=0.0))
    assert round_spans(tmp_path) == ({"train": 0.5}, 2 * 4)
    # committed, its inputs kept for the grace period; and a tool's hidden backup of one of them
    (merged,) = compact(str(tmp_path), CompactionSettings(settle_s=0, grace_s=3600))
    assert merged.files_in == 2 and merged.inputs_deleted == 0
    partition = tmp_path / "spans" / merged.partition
    shutil.copy(partition / merged.merged[0], partition / f".backup-of-{merged.merged[0]}")
    glob = duckdb.sql(f"SELECT count(*) FROM read_parquet('{tmp_path}/spans/**/*.parquet')").fetchall()[0][0]
    assert glob == (2 + 2 + 1) * 5  # a glob of spans/ reads the inputs, the output and the copy
    assert round_spans(tmp_path) == ({"train": 0.5}, 2 * 4)


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
