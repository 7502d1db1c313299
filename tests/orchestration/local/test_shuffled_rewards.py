"""--shuffle-rewards, the control of a learning claim: the same round, its training rewards permuted among its episodes."""

from __future__ import annotations

import random

import pyarrow.parquet as pq

from tracerl.orchestration.local.run import SHUFFLED_REWARD, shuffle_rewards
from tracerl.pipeline import build_dataset, dataset_table
from tracerl.schemas import attributes as A
from tracerl_testing.span_builders import episode_span, llm_call, reward_span, span, write_spans

OWN = {"e0": 1.0, "e1": 0.0, "e2": 0.0, "e3": 0.5, "e4": 0.0, "e5": 1.0}


def round_spans(data_dir):
    rows = []
    for i, (episode, reward) in enumerate(OWN.items()):
        rows += [episode_span(episode, 0, 100, task=f"t{i % 2}"), llm_call(episode, "call", 1, 10, [1, 2], [3, i]),
                 reward_span(episode, "r", 50, reward)]
    held_out = {A.SPLIT: "test"}
    rows += [episode_span("held", 0, 100, task="h", attrs=held_out),
             span("held", "r", A.REWARD_SPAN_NAME, 50, 50, attrs={**held_out, A.REWARD_VALUE: 1.0})]
    return write_spans(data_dir, rows)


def test_the_rewards_are_the_rounds_own_permuted_among_its_training_episodes(data_dir):
    assert shuffle_rewards(round_spans(data_dir), random.Random(3)) == len(OWN)  # held-out episodes keep theirs
    table = pq.read_table(data_dir / "rewards" / f"{SHUFFLED_REWARD}.parquet").to_pylist()
    shuffled = {row["episode_id"]: row["value"] for row in table}
    assert set(shuffled) == set(OWN) and sorted(shuffled.values()) == sorted(OWN.values())
    assert shuffled != OWN  # this seed moves rewards between episodes
    assert shuffle_rewards(round_spans(data_dir.parent / "again"), random.Random(3)) == len(OWN)
    again = pq.read_table(data_dir.parent / "again" / "rewards" / f"{SHUFFLED_REWARD}.parquet").to_pylist()
    assert {r["episode_id"]: r["value"] for r in again} == shuffled  # same seed, same permutation


def test_the_build_weighing_only_them_trains_on_the_permuted_rewards(data_dir, tmp_path):
    shuffle_rewards(round_spans(data_dir), random.Random(3))
    shuffled = {r["episode_id"]: r["value"] for r in pq.read_table(data_dir / "rewards" / f"{SHUFFLED_REWARD}.parquet").to_pylist()}
    build_dataset(data_dir, tmp_path / "ds", splits=("train",), default_rules=False, reward_weights={SHUFFLED_REWARD: 1.0})
    rows = dataset_table(tmp_path / "ds").to_pylist()
    assert {r["episode_id"]: r["reward"] for r in rows} == shuffled
