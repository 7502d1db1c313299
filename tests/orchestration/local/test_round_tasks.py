"""What a round asks the agent to run: held-out tasks greedily, then each training task a group's worth of times."""

from __future__ import annotations

import json

from tracerl.orchestration.local.config import LocalConfig
from tracerl.orchestration.local.run import write_round_tasks

TRAIN = [{"id": f"t{i}", "question": f"q{i}"} for i in range(10)]
HELD_OUT = [{"id": f"h{i}", "question": f"h{i}"} for i in range(5)]


def lines(tmp_path, **changes) -> list[dict]:
    path = tmp_path / "tasks.jsonl"
    write_round_tasks(path, TRAIN, HELD_OUT, LocalConfig(tasks_per_round=3, group_size=4, eval_tasks=2, **changes), rnd=1)
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_held_out_tasks_are_greedy_and_training_ones_sampled_at_the_chosen_temperature(tmp_path):
    rows = lines(tmp_path, temperature=0.6)
    assert [(r["id"], r["temperature"]) for r in rows[:2]] == [("h0", 0.0), ("h1", 0.0)]
    training = rows[2:]
    assert len(training) == 3 * 4 and {r["temperature"] for r in training} == {0.6}
    assert len({r["seed"] for r in training}) == len(training)  # every sample of a group its own seed


def test_the_default_samples_the_policy_as_it_is(tmp_path):
    assert {r["temperature"] for r in lines(tmp_path)[2:]} == {1.0}


def test_the_temperature_changes_nothing_else(tmp_path):
    without = [{k: v for k, v in r.items() if k != "temperature"} for r in lines(tmp_path)]
    assert without == [{k: v for k, v in r.items() if k != "temperature"} for r in lines(tmp_path, temperature=0.5)]
