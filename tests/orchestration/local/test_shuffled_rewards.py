"""--shuffle-rewards, the control of a learning claim: each training episode's whole reward, its automatic
intermediate rewards included, given to another episode of its own task group. Each group keeps its
reward values (so the same groups carry an advantage as in RL); only which episode earned what is lost."""

from __future__ import annotations

import random
from collections import defaultdict

import pyarrow.parquet as pq

from tracerl.orchestration.local.run import SHUFFLED_REWARD, groups_with_signal, shuffle_within_groups
from tracerl.pipeline import build_dataset, dataset_table
from tracerl.schemas import attributes as A
from tracerl_testing.span_builders import episode_span, llm_call, reward_span, span, tool_span, write_spans

# episode -> (task group, outcome reward, its tool failed: an automatic -0.1 on top)
OWN = {"e0": ("t0", 1.0, False), "e1": ("t0", 0.0, True), "e2": ("t0", 0.0, False),
       "e3": ("t1", 0.5, False), "e4": ("t1", 0.0, True), "e5": ("t1", 1.0, False), "e6": ("t2", 0.0, False), "e7": ("t2", 0.0, False)}


def round_spans(data_dir):
    rows = []
    for i, (episode, (task, reward, tool_failed)) in enumerate(OWN.items()):
        rows += [episode_span(episode, 0, 100, task=task), llm_call(episode, "call", 1, 10, [1, 2], [3, i]),
                 tool_span(episode, "tool", 12, 14, status="ERROR" if tool_failed else "OK"), reward_span(episode, "r", 50, reward)]
    held_out = {A.SPLIT: "test"}
    rows += [episode_span("held", 0, 100, task="h", attrs=held_out),
             span("held", "r", A.REWARD_SPAN_NAME, 50, 50, attrs={**held_out, A.REWARD_VALUE: 1.0})]
    return write_spans(data_dir, rows)


def own_build(data_dir, out):
    build_dataset(data_dir, out, splits=("train",))
    return out


def shuffled_values(data_dir) -> dict[str, float]:
    return {r["episode_id"]: r["value"] for r in pq.read_table(data_dir / "rewards" / f"{SHUFFLED_REWARD}.parquet").to_pylist()}


def test_each_groups_whole_rewards_are_permuted_within_it_intermediate_rewards_included(data_dir, tmp_path):
    built = own_build(round_spans(data_dir), tmp_path / "own")
    returns = {r["episode_id"]: r["return"] for r in dataset_table(built).to_pylist()}
    assert returns["e1"] == -0.1 and returns["e0"] == 1.0  # the failed tool's automatic reward is in the return
    assert shuffle_within_groups(built, data_dir, random.Random(3)) == len(OWN)  # held-out episodes keep theirs
    shuffled = shuffled_values(data_dir)
    by_group: dict[str, tuple[list, list]] = defaultdict(lambda: ([], []))
    for episode, (task, _, _) in OWN.items():
        by_group[task][0].append(returns[episode])
        by_group[task][1].append(shuffled[episode])
    assert all(sorted(own) == sorted(got) for own, got in by_group.values())  # each group keeps its values
    assert shuffled != returns  # this seed moves rewards between episodes
    again = tmp_path / "again"
    shuffle_within_groups(own_build(round_spans(again), tmp_path / "own-again"), again, random.Random(3))
    assert shuffled_values(again) == shuffled  # same seed, same permutation


def test_the_control_build_trains_on_the_permuted_returns_and_the_same_groups_carry_signal(data_dir, tmp_path):
    built = own_build(round_spans(data_dir), tmp_path / "own")
    shuffle_within_groups(built, data_dir, random.Random(3))
    build_dataset(data_dir, tmp_path / "control", splits=("train",), default_rules=False, reward_weights={SHUFFLED_REWARD: 1.0})
    rows = dataset_table(tmp_path / "control").to_pylist()
    assert {r["episode_id"]: r["return"] for r in rows} == shuffled_values(data_dir)
    # t2's episodes all earned 0: no advantage in either arm; t0 and t1 carry one in both
    assert groups_with_signal(built) == groups_with_signal(tmp_path / "control") == {"task_groups": 3, "groups_with_signal": 2}
