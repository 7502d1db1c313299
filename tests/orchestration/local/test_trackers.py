"""The local loop with ``--report-to``: each round's ``metrics.jsonl`` row at step = the round, the reward curve as an
image of each round, the run's config once; read back with each tracker's own reader (tracerl_testing.trackers)."""

from __future__ import annotations

import json

import pytest

from tracerl.orchestration.demo.recipe import DEMO
from tracerl.orchestration.local.config import LocalConfig
from tracerl.orchestration.local.run import run_local
from tracerl.trainer.tiny_model import build_tiny_model
from tracerl.trainer.training.config import TrainConfig
from tracerl_testing.installed import require_module
from tracerl_testing.trackers import HOW, mlflow_runs, tensorboard_run, tracker_env, wandb_runs


@pytest.mark.slow
def test_the_loop_reports_each_round_and_its_reward_curve(tmp_path, monkeypatch):
    for module in ("tensorboard", "mlflow", "wandb"):
        require_module(module, HOW)
    for name, value in tracker_env(tmp_path).items():
        monkeypatch.setenv(name, value)
    start = build_tiny_model(tmp_path / "start", seed=1)
    out = tmp_path / "run"
    cfg = LocalConfig(out=out, rounds=1, tasks_per_round=4, group_size=2, eval_tasks=3, seed=0, model=str(start),
                      train=TrainConfig(epochs=1, minibatch_size=8, report_to=("tensorboard", "mlflow", "wandb")))
    phases = []
    rows = run_local(DEMO, cfg, on_phase=lambda rnd, text: phases.append(text))
    assert not [text for text in phases if text.startswith("warning")]
    assert set(json.loads((out / "trackers.json").read_text())) == {"tensorboard", "mlflow", "wandb"}
    curve = (out / "reward_curve.png").read_bytes()  # the last round's

    board = tensorboard_run(out / "tensorboard" / "run")
    assert board["scalars"]["eval_mean_reward"] == [(r["round"], pytest.approx(r["eval_mean_reward"])) for r in rows]
    assert board["scalars"]["policy_version"] == [(0, 0.0), (1, 1.0)]
    assert [step for step, _ in board["scalars"]["rollout_seconds"]] == [0, 1]
    assert [step for step, _ in board["images"]["reward_curve"]] == [0, 1] and board["images"]["reward_curve"][-1][1] == curve
    assert json.loads(board["text"]["config"].removeprefix("```json\n").removesuffix("\n```"))["recipe"] == "demo"

    (run,) = mlflow_runs(tmp_path / "mlruns")
    assert run["name"] == "run" and run["status"] == "FINISHED" and run["params"]["recipe"] == "demo" and run["params"]["rounds"] == "1"
    assert run["metrics"]["train_mean_reward"] == [(r["round"], pytest.approx(r["train_mean_reward"])) for r in rows]
    assert run["metrics"]["loss"] == [(0, pytest.approx(rows[0]["loss"]))]  # round 1, the last, evaluates only
    assert run["artifacts"] == ["reward_curve.png"]

    (run,) = wandb_runs(out)
    assert run["config"]["recipe"] == "demo" and run["config"]["train"]["report_to"] == ["tensorboard", "mlflow", "wandb"]
    assert [(row["_step"], row["transitions"], row["reward_curve/_type"]) for row in run["history"]] == [
        (r["round"], r["transitions"], "image-file") for r in rows]
