"""The recipe's split of the leaderboard: held-out questions (simple_python, then multiple) offer no function
any training question offers, and the worked examples are training questions that are then never trained on."""

from __future__ import annotations

import pytest

from tracerl_testing.installed import require_module
from examples.bfcl import recipe
from examples.bfcl import task as bfcl

require_module("bfcl_eval", bfcl.INSTALL_HINT)


@pytest.fixture(scope="module", params=[0, 1])
def split(request):
    return recipe.tasks(request.param, None)


def names(lines: list[dict]) -> set[str]:
    return {f["name"] for line in lines for f in line["functions"]}


def test_held_out_functions_are_never_trained_on_and_multiple_comes_after_simple(split):
    train, held_out = split
    simple = [t for t in held_out if t["category"] == bfcl.TRAIN_CATEGORY]
    multiple = [t for t in held_out if t["category"] == bfcl.TRANSFER_CATEGORY]
    assert len(simple) >= recipe.HELD_OUT and len(multiple) == recipe.TRANSFER
    assert held_out == simple + multiple and {t["split"] for t in held_out} == {"test"} and {t["split"] for t in train} == {"train"}
    assert not names(train) & names(held_out)
    assert {t["category"] for t in train} == {bfcl.TRAIN_CATEGORY}
    assert len(simple) < recipe.HELD_OUT + 5  # the loop's --eval-tasks default takes them all, then the multiple ones


def test_the_worked_examples_are_short_training_questions_left_out_of_training(split):
    train, held_out = split
    (first, second) = train[0]["examples"]
    assert all(line["examples"] == [first, second] for line in train + held_out)
    asked = {t["question"][0]["content"] for t in train + held_out}
    assert first["question"][0]["content"] not in asked and second["question"][0]["content"] not in asked
    assert not {f["name"] for e in (first, second) for f in e["functions"]} & names(held_out)
    assert all(e["calls"] and e["calls"][0]["name"] == e["functions"][0]["name"] for e in (first, second))


@pytest.mark.parametrize("seed", range(5))
def test_the_default_eval_tasks_cover_the_held_out_set(seed):
    assert recipe.RECIPE.defaults.eval_tasks >= len(recipe.tasks(seed, None)[1])
