"""``--report-to``: experiment trackers (src/tracerl/trainer/trackers.py), checked through a real driver and read back
with each tracker's own reader (tracerl_testing.trackers): TensorBoard's EventAccumulator, MlflowClient over a
file store, the W&B offline run's transaction log, Trackio's API.

The scheduled rounds' run across processes: tests/orchestration/rounds/test_trackers.py; the local loop's (slow):
tests/orchestration/local/test_trackers.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tracerl.trainer import trackers as T
from tracerl.trainer.trackers import TrackerError, TrackerRun, Trackers, check_trackers, open_trackers, parse_report_to, scalars
from tracerl.trainer.training.config import TrainConfig
from tracerl_testing.installed import require_module
from tracerl_testing.trackers import HOW, mlflow_runs, tensorboard_run, tracker_env, trackio_runs, wandb_runs

ROWS = [
    {"prompt_token_ids": [10, 11, 12], "response_token_ids": [20 + i % 2, 5], "response_logprobs": None, "advantage": 1.0 if i % 2 else -1.0}
    for i in range(8)
]
EVERY = "tensorboard,mlflow,wandb,trackio"


def test_report_to_reads_as_hugging_faces_report_to():
    assert parse_report_to("mlflow, TensorBoard,mlflow") == ("mlflow", "tensorboard")  # commas, case, repeats
    assert parse_report_to(["wandb", "trackio"]) == ("wandb", "trackio")  # a TOML list
    assert parse_report_to("none") == parse_report_to(None) == parse_report_to("") == ()
    assert parse_report_to("all") == ("all",)
    assert TrainConfig(report_to="wandb,mlflow").report_to == ("wandb", "mlflow") and TrainConfig().report_to == ()


def test_an_unknown_tracker_is_refused_when_the_option_is_read_naming_the_known_ones(tmp_path):
    from tracerl.cli import app
    from tracerl.orchestration.rounds.config import RoundConfigError, load_config

    known = "mlflow, tensorboard, trackio, wandb, all (every one installed) or none"
    with pytest.raises(ValueError, match="unknown tracker"):
        parse_report_to("wandb,comet")
    with pytest.raises(ValueError, match="stand alone"):
        parse_report_to("none,wandb")
    with pytest.raises(ValueError) as error:
        TrainConfig(report_to="comet")
    assert known in str(error.value)

    done = CliRunner().invoke(app, ["train", "--dataset", "ds", "--model", "m", "--out", "o", "--report-to", "comet"], env={"COLUMNS": "400"})
    assert done.exit_code == 2 and "--report-to" in done.output and "'comet'" in done.output and "mlflow, tensorboard" in done.output

    config = tmp_path / "round.toml"
    config.write_text('spans = "data"\nstate = "state"\nmodel = "m"\n[train]\nreport_to = "comet"\n')
    with pytest.raises(RoundConfigError) as error:
        load_config(config)
    assert "[train]" in str(error.value) and "'comet'" in str(error.value) and known in str(error.value)


def test_a_tracker_not_installed_is_refused_before_anything_starts_saying_what_to_install(monkeypatch, tmp_path, tiny_checkpoint):
    """Each driver refuses it before any work: `tracerl train` before training, the loop before round 0, a scheduled
    round with exit 2 (config_error); the message names the extra."""
    from tracerl.cli import app
    from tracerl.orchestration.demo.recipe import DEMO
    from tracerl.orchestration.local.config import LocalConfig
    from tracerl.orchestration.local.run import LocalSetupError, run_local

    monkeypatch.setattr(T.WandbTracker, "module", "tracerl_no_such_module")
    says = "--report-to wandb: wandb not installed: pip install 'tracerl[trackers]' (or pip install wandb)"
    with pytest.raises(TrackerError, match=r"pip install 'tracerl\[trackers\]'"):
        check_trackers(("tensorboard", "wandb"))
    assert "wandb" not in T.resolve(("all",))  # `all`: the installed ones

    out = tmp_path / "v1"
    done = CliRunner().invoke(app, ["train", "--dataset", str(tmp_path), "--model", str(tiny_checkpoint), "--out", str(out), "--report-to", "wandb"],
                              env={"COLUMNS": "400"})
    assert done.exit_code == 2 and says in " ".join(done.output.split()) and not out.exists()

    with pytest.raises(LocalSetupError, match=r"pip install 'tracerl\[trackers\]'"):
        run_local(DEMO, LocalConfig(out=tmp_path / "run", rounds=1, train=TrainConfig(report_to=("wandb",))))
    assert not (tmp_path / "run" / "rounds").exists()

    done = CliRunner().invoke(app, ["train", "run", "--spans", str(tmp_path), "--state", str(tmp_path / "state"), "--model", str(tiny_checkpoint),
                                    "--report-to", "wandb"])
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert done.exit_code == 2 and summary == {"status": "config_error", "reason": says} and not (tmp_path / "state").exists()


class Failing:
    """A tracker that fails at ``fail_at``, counting what reached it."""

    name, module, package = "failing", "json", "-"
    calls: list[str] = []

    def __init__(self, run: TrackerRun, fail_at: str = "log") -> None:
        self.fail_at = fail_at

    def _call(self, method: str) -> None:
        Failing.calls.append(method)
        if method == self.fail_at:
            raise OSError("the tracking server went away")

    def start(self, config):
        self._call("start")

    def log(self, row, step):
        self._call("log")

    def log_artifact(self, path, step=None):
        self._call("log_artifact")

    def finish(self):
        self._call("finish")


@pytest.mark.parametrize("fail_at", ["start", "log"])
def test_a_tracker_that_fails_is_dropped_with_a_warning_and_the_others_go_on(tmp_path, fail_at):
    require_module("tensorboard", HOW)
    Failing.calls = []
    run = TrackerRun("run", tmp_path)
    warnings = []
    trackers = Trackers([Failing(run, fail_at), T.TensorBoardTracker(run)], run, warn=warnings.append)
    with trackers:
        trackers.start({"lr": 1e-3})
        for step in range(3):
            trackers.log({"loss": 1.0 / (step + 1), "policies": {"a": {"loss": 0.5}}, "status": "trained"}, step)
    assert trackers.names == ()  # finished
    assert Failing.calls == [*(["start"] if fail_at == "start" else ["start", "log"]), "finish"]  # dropped at once, finished
    assert len(warnings) == 1 and "the failing tracker failed" in warnings[0] and "went away" in warnings[0]
    assert tensorboard_run(tmp_path / "tensorboard" / "run")["scalars"]["loss"] == [(0, 1.0), (1, 0.5), (2, pytest.approx(1 / 3))]


def test_a_row_is_reported_as_its_numbers():
    row = {"round": 2, "train_mean_reward": 0.5, "eval_mean_reward": None, "status": "trained", "published": True,
           "policies": {"writer": {"policy_version": 2, "train_loss": 0.1}}, "skipped": {}, "episodes": [1]}
    assert scalars(row) == {"round": 2, "train_mean_reward": 0.5, "published": 1, "policies/writer/policy_version": 2,
                            "policies/writer/train_loss": 0.1}


def test_all_leaves_out_a_tracker_that_cannot_start_as_configured(monkeypatch):
    require_module("mlflow", HOW)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setattr(T, "_importable", lambda module: module in ("mlflow", "tensorboard"))
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        distribution("mlflow")
        full = True
    except PackageNotFoundError:
        full = False
    if full:  # the full package's default store is a local SQLite file: it starts
        assert check_trackers(("all",)) == ("mlflow", "tensorboard")
        return
    with pytest.raises(TrackerError, match="MLFLOW_TRACKING_URI"):  # named: refused, saying what to set
        check_trackers(("mlflow",))
    warnings = []
    assert check_trackers(("all",), warn=warnings.append) == ("tensorboard",) and "MLFLOW_TRACKING_URI" in warnings[0]


# ---- `tracerl train --report-to` every tracker, read back ----


@pytest.fixture(scope="module")
def reported(tmp_path_factory, tiny_checkpoint, write_dataset) -> tuple[Path, dict]:
    """One `tracerl train --version 3 --report-to tensorboard,mlflow,wandb,trackio` pass (a real process, every tracker local)."""
    for module in ("tensorboard", "mlflow", "wandb", "trackio"):
        require_module(module, HOW)
    folder = tmp_path_factory.mktemp("reported")
    write_dataset(folder / "ds", ROWS)
    command = [sys.executable, "-m", "tracerl", "train", "--dataset", str(folder / "ds"), "--model", str(tiny_checkpoint),
               "--out", str(folder / "checkpoints" / "v3"), "--version", "3", "--epochs", "1", "--minibatch-size", "8", "--report-to", EVERY]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=tracker_env(folder))
    assert done.returncode == 0, done.stderr
    assert "warning" not in done.stderr, done.stderr  # no tracker dropped
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1, done.stdout  # stdout is the JSON line alone: the trackers' own output went to stderr
    return folder, json.loads(lines[0])


def test_tensorboard_gets_the_pass_at_its_version_and_its_config(reported):
    folder, result = reported
    run = tensorboard_run(folder / "checkpoints" / "tensorboard" / "v3")
    assert run["scalars"]["samples"] == [(3, 8.0)] and run["scalars"]["loss"] == [(3, pytest.approx(result["loss"]))]
    assert run["scalars"]["steps"] == [(3, result["steps"])]
    config = json.loads(run["text"]["config"].removeprefix("```json\n").removesuffix("\n```"))
    assert config["version"] == 3 and config["train"]["epochs"] == 1 and config["train"]["report_to"] == EVERY.split(",")


def test_mlflow_gets_the_config_as_parameters_and_the_row_as_metrics(reported):
    folder, result = reported
    (run,) = mlflow_runs(folder / "mlruns")
    assert run["name"] == "v3" and run["status"] == "FINISHED"
    assert run["params"]["train.epochs"] == "1" and run["params"]["train.minibatch_size"] == "8" and run["params"]["version"] == "3"
    assert run["params"]["out"] == str((folder / "checkpoints" / "v3").resolve())
    assert run["metrics"]["samples"] == [(3, 8.0)] and run["metrics"]["entropy"] == [(3, pytest.approx(result["entropy"]))]
    assert "checkpoint" not in run["metrics"] and "served_logprob_gap" not in run["metrics"]  # text, None: not metrics


def test_wandb_offline_gets_the_config_and_the_row_at_its_step(reported):
    folder, result = reported
    (run,) = wandb_runs(folder / "checkpoints")
    assert run["name"] == "v3"
    assert run["config"]["train"]["epochs"] == 1 and run["config"]["version"] == 3
    (row,) = run["history"]
    assert row["_step"] == 3 and row["samples"] == 8 and row["loss"] == pytest.approx(result["loss"])


def test_trackio_gets_the_config_and_the_row_at_its_step(reported):
    folder, result = reported
    (run,) = trackio_runs(folder / "trackio")
    assert run["name"] == "v3" and run["config"]["train"]["epochs"] == 1
    (row,) = [log for log in run["logs"] if "samples" in log]
    assert row["step"] == 3 and row["samples"] == 8 and row["tokens"] == result["tokens"]


def test_a_file_and_an_image_reach_each_tracker_that_keeps_them(tmp_path, monkeypatch):
    """``log_artifact``: a PNG as an image at its step (TensorBoard, W&B, Trackio) and a file (MLflow, W&B, Trackio);
    what the loop's reward curve and a round's report take (their drivers' tests check they are sent)."""
    for module in ("tensorboard", "mlflow", "wandb", "trackio"):
        require_module(module, HOW)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.figure(figsize=(2, 1)).savefig(tmp_path / "reward_curve.png")
    plt.close("all")
    (tmp_path / "report.html").write_text("<html>report</html>")
    script = (
        "import sys; from pathlib import Path; from tracerl.trainer.trackers import TrackerRun, open_trackers\n"
        "folder = Path(sys.argv[1]); run = TrackerRun('files', folder)\n"
        "with open_trackers(sys.argv[2].split(','), run, {'a': 1}) as t:\n"
        "    t.log({'x': 1.0}, 1); t.log_artifact(folder / 'reward_curve.png', 1); t.log_artifact(folder / 'report.html', 1)\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path), EVERY], capture_output=True, text=True, timeout=300, env=tracker_env(tmp_path))
    assert done.returncode == 0 and "warning" not in done.stderr, done.stderr
    png = (tmp_path / "reward_curve.png").read_bytes()
    assert tensorboard_run(tmp_path / "tensorboard" / "files")["images"]["reward_curve"] == [(1, png)]
    (run,) = mlflow_runs(tmp_path / "mlruns")
    assert run["artifacts"] == ["report.html", "reward_curve.png"]
    (run,) = wandb_runs(tmp_path)
    (row,) = run["history"]  # the image joins the row of its step
    assert row["_step"] == 1 and row["x"] == 1 and row["reward_curve/_type"] == "image-file"
    assert (run["dir"] / "files" / row["reward_curve/path"]).read_bytes() == png and "report.html" in run["files"]
    (run,) = trackio_runs(tmp_path / "trackio")
    images = [log["reward_curve"] for log in run["logs"] if "reward_curve" in log]
    assert len(images) == 1 and images[0]["_type"] == "trackio.image"
