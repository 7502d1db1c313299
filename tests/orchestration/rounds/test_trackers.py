"""``tracerl train run --report-to``: scheduled rounds are one process each, and report to one run across them
(``STATE/trackers.json``), each trained round's ``metrics.jsonl`` row at step = its version, the config once,
the refreshed report as an artifact. Every tracker local, read back with its own reader (tracerl_testing.trackers)."""

from __future__ import annotations

import json

from tracerl_testing.installed import require_module
from tracerl_testing.trackers import HOW, mlflow_runs, tensorboard_run, tracker_env, trackio_runs, wandb_runs

EVERY = "tensorboard,mlflow,wandb,trackio"


def test_rounds_report_to_one_run_each_trained_version_at_its_step(tmp_path, data_dir, capture, tiny_checkpoint, tracerl, monkeypatch):
    for module in ("tensorboard", "mlflow", "wandb", "trackio"):
        require_module(module, HOW)
    for name, value in tracker_env(tmp_path).items():
        monkeypatch.setenv(name, value)  # the `tracerl` fixture's processes inherit them
    config = tmp_path / "round.toml"
    config.write_text(f"spans = {json.dumps(str(data_dir))}\nstate = \"state\"\nmodel = {json.dumps(str(tiny_checkpoint))}\nmin_episodes = 4\n"
                      "[train]\nepochs = 1\nminibatch_size = 8\n")
    state = tmp_path / "state"
    summaries = []
    for _ in range(2):
        capture(4)
        done = tracerl("train", "run", "--config", str(config), "--report-to", EVERY)
        assert done.returncode == 0 and done.summary["status"] == "trained", done.stderr
        assert "warning" not in done.stderr, done.stderr
        summaries.append(done.summary)
    idle = tracerl("train", "run", "--config", str(config), "--report-to", EVERY)
    assert idle.summary["status"] == "idle"
    rows = [json.loads(line) for line in (state / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rows] == [1, 2]
    recorded = json.loads((state / "trackers.json").read_text())
    assert set(recorded) == {"tensorboard", "mlflow", "wandb", "trackio"}

    board = tensorboard_run(state / "tensorboard" / "state")
    assert board["scalars"]["samples"] == [(1, rows[0]["samples"]), (2, rows[1]["samples"])]
    assert board["scalars"]["version"] == [(1, 1.0), (2, 2.0)] and board["scalars"]["policy_version"] == [(1, 0.0), (2, 1.0)]
    assert [step for step, _ in board["scalars"]["train_seconds"]] == [1, 2]  # the phases' seconds
    assert json.loads(board["text"]["config"].removeprefix("```json\n").removesuffix("\n```"))["min_episodes"] == 4

    (run,) = mlflow_runs(tmp_path / "mlruns")  # one run, continued by the second round
    assert run["id"] == recorded["mlflow"] and run["name"] == "state" and run["status"] == "FINISHED"
    assert run["metrics"]["episodes"] == [(1, 4.0), (2, 4.0)] and run["metrics"]["version"] == [(1, 1.0), (2, 2.0)]
    assert run["metrics"]["loss"] == [(1, rows[0]["loss"]), (2, rows[1]["loss"])]
    assert run["params"]["min_episodes"] == "4" and run["params"]["train.report_to"] == json.dumps(EVERY.split(","))
    assert run["artifacts"] == ["report.html"]  # the report each trained round refreshes

    first, second = wandb_runs(state)  # offline, a folder per process, one run id: `wandb sync` makes them one run
    assert first["id"] == second["id"] == recorded["wandb"]
    assert [row["_step"] for row in first["history"]] == [1] and [row["_step"] for row in second["history"]] == [2]
    assert first["config"]["min_episodes"] == 4 and "min_episodes" not in second["config"]  # the config once
    assert "report.html" in first["files"] and "report.html" in second["files"]

    (run,) = trackio_runs(tmp_path / "trackio")
    assert run["name"] == recorded["trackio"] == "state"
    assert [(log["step"], log["samples"]) for log in run["logs"] if "samples" in log] == [(1, rows[0]["samples"]), (2, rows[1]["samples"])]


def test_several_policies_report_one_row_of_the_round_at_the_newest_version(tmp_path, tiny_checkpoint):
    """Each policy of a round has its own versions; the round's rows go as one, ``policies/NAME/...``, at the newest of
    them, so that a tracker whose steps only grow (W&B) takes every round."""
    require_module("tensorboard", HOW)
    from tracerl.orchestration.rounds.config import RoundConfig
    from tracerl.orchestration.rounds.round import _track
    from tracerl.trainer.training.config import TrainConfig

    config = RoundConfig(spans=str(tmp_path / "data"), state=tmp_path / "state", model=tiny_checkpoint, report=False,
                         train=TrainConfig(report_to=("tensorboard",)))
    phases = []
    _track(config, {"writer": (3, {"round": 3, "loss": 0.5}), "checker": (2, {"round": 2, "loss": 0.25})}, tmp_path / "state" / "report.html",
           phases.append)
    _track(config, {}, tmp_path / "state" / "report.html", phases.append)  # a round that made no version: nothing opened
    scalars = tensorboard_run(tmp_path / "state" / "tensorboard" / "state")["scalars"]
    assert scalars == {"policies/writer/round": [(3, 3.0)], "policies/writer/loss": [(3, 0.5)],
                       "policies/checker/round": [(3, 2.0)], "policies/checker/loss": [(3, 0.25)]}
    assert phases == []
