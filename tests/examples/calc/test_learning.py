"""The loop teaches the calculator agent the skill: which operation each phrase asks for.

One seed with the recipe's own defaults, from a fresh warm start (the starting policy
picks the operation at random): the held-out reward (greedy, on problems whose operation
and numbers never occur in training) of the last round is at least 0.2 above round 0's.
``benchmarks/learning.py --recipe examples.calc.recipe:RECIPE`` measures the same over three
seeds with its controls.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from examples.calc.recipe import RECIPE
from tracerl.orchestration.loop.loop import run_loop

# the longest test of the suite (5-7 minutes on 2 cores, more beside another worker): the
# per-test timeout is there to catch a hang, not to time a learning run
pytestmark = [pytest.mark.slow, pytest.mark.frameworks, pytest.mark.timeout(1500)]


def test_reinforcement_learning_raises_the_held_out_reward(tmp_path):
    rows = run_loop(RECIPE, replace(RECIPE.defaults, out=tmp_path / "run", seed=0))
    held_out = [row["eval_mean_reward"] for row in rows]
    assert held_out[-1] - held_out[0] >= 0.2, f"held-out reward per round: {held_out}"
