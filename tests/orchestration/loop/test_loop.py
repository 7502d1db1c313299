"""The whole loop, end to end: agent under `tracerl run` -> spans -> dataset -> training -> refreshed server."""

from __future__ import annotations

import json

import pytest

from tracerl.orchestration.demo.recipe import DEMO
from tracerl.orchestration.loop.config import LoopConfig
from tracerl.orchestration.loop.loop import run_loop
from tracerl.trainer.tiny_model import build_tiny_model
from tracerl.trainer.training.config import TrainConfig


@pytest.mark.slow
def test_short_loop_trains_and_refreshes_the_endpoint(tmp_path):
    start = build_tiny_model(tmp_path / "start", seed=1)  # untrained: the loop must still run cleanly
    cfg = LoopConfig(
        out=tmp_path / "run", rounds=1, tasks_per_round=4, group_size=2, eval_tasks=3, seed=0,
        model=str(start), train=TrainConfig(epochs=1, minibatch_size=8),
    )
    phases = []
    rows = run_loop(DEMO, cfg, on_phase=lambda rnd, text: phases.append((rnd, text)))

    lines = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert lines == rows and [r["round"] for r in rows] == [0, 1]
    assert [r["policy_version"] for r in rows] == [0, 1]
    for row in rows:
        assert 0.0 <= row["train_mean_reward"] <= 1.0 and 0.0 <= row["eval_mean_reward"] <= 1.0
        # one transition per LLM call: 2 calls per episode, training episodes only
        assert row["transitions"] == 4 * 2 * 2
    assert rows[0]["train_loss"] is not None and "train_loss" not in rows[1]
    # the trainer starts from the weights that sampled round 0: its log-probs are the served ones
    assert rows[0]["served_logprob_gap"] < 1e-3
    assert (tmp_path / "run" / "policy" / "v1" / "config.json").exists()
    assert (tmp_path / "run" / "reward_curve.png").stat().st_size > 1000
    assert (0, "running the agent") in phases and (0, "training") in phases
