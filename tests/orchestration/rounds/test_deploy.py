"""deploy/: the crontab line, the systemd unit and the Kubernetes CronJob run exactly the command these tests run."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import yaml

from tracerl_testing.span_builders import chat_episode, write_spans

DEPLOY = Path(__file__).resolve().parents[3] / "deploy"


def crontab_entry() -> tuple[str, str]:
    """(schedule, command) of the one job in deploy/crontab."""
    [line] = [x for x in (DEPLOY / "crontab").read_text().splitlines() if x.strip() and not x.startswith("#")]
    fields = line.split(None, 5)
    return " ".join(fields[:5]), fields[5]


def unit_values(name: str, key: str) -> list[str]:
    return [line.split("=", 1)[1] for line in (DEPLOY / name).read_text().splitlines() if line.startswith(f"{key}=")]


def cronjob_container() -> tuple[dict, dict]:
    job = yaml.safe_load((DEPLOY / "cronjob.yaml").read_text())
    [container] = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    return job, container


def a_round_folder(home: Path, model: Path, report: bool = False) -> Path:
    """``HOME/tracerl`` with a round.toml over captured episodes (deploy/round.toml's keys, local values)."""
    folder = home / "tracerl"
    rows = [row for i in range(4) for row in chat_episode(f"ep-{i}", task=f"t{i % 2}", reward=float(i % 2))]
    write_spans(home / "data", rows)
    folder.mkdir(parents=True)
    (folder / "round.toml").write_text(
        f'spans = "{home / "data"}"\nstate = "rounds"\nmodel = "{model}"\nreport = {str(report).lower()}\n[train]\nepochs = 1\n'
    )
    return folder


def venv_path() -> str:
    return f"{Path(sys.executable).parent}:/usr/bin:/bin"  # where `tracerl` is installed, as the docs ask of PATH


def test_the_crontab_line_runs_a_round_logs_its_json_line_and_refreshes_the_report(tmp_path, tiny_checkpoint):
    folder = a_round_folder(tmp_path, tiny_checkpoint, report=True)
    schedule, command = crontab_entry()
    assert schedule == "*/10 * * * *"
    env = {"HOME": str(tmp_path), "PATH": venv_path(), "LANG": "C.UTF-8"}  # cron's spare environment
    done = subprocess.run(["/bin/sh", "-c", command], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (folder / "rounds.log").read_text()
    summary = json.loads((folder / "rounds.log").read_text().strip().splitlines()[-1])
    assert summary["status"] == "trained" and summary["version"] == 1 and summary["episodes"] == 4
    report = (folder / "rounds" / "report.html").read_text()
    assert "report" in summary["seconds"] and "<svg" in report and "clip_fraction" in report  # with the rounds' metrics


def test_the_systemd_units_execstart_runs_a_round_in_its_working_directory(tmp_path, tiny_checkpoint):
    folder = a_round_folder(tmp_path, tiny_checkpoint)
    [exec_start] = unit_values("tracerl-round.service", "ExecStart")
    assert unit_values("tracerl-round.service", "Type") == ["oneshot"]
    assert unit_values("tracerl-round.timer", "OnCalendar") == ["*:0/10"] and unit_values("tracerl-round.timer", "Persistent") == ["true"]
    env = {**os.environ, "PATH": venv_path()}
    done = subprocess.run(shlex.split(exec_start), cwd=folder, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1])["status"] == "trained"


def test_the_cronjob_runs_the_same_command_on_the_same_schedule_one_at_a_time():
    job, container = cronjob_container()
    command = shlex.join(container["command"])
    assert command == "tracerl train run --config round.toml"
    assert f" {command} " in f" {crontab_entry()[1]} "
    assert unit_values("tracerl-round.service", "ExecStart") == [f"/usr/bin/env {command}"]
    assert job["spec"]["schedule"] == crontab_entry()[0] and job["spec"]["concurrencyPolicy"] == "Forbid"
    assert container["workingDir"] == unit_values("tracerl-round.service", "WorkingDirectory")[0]


def test_the_example_config_is_one_a_round_accepts(tmp_path, tiny_checkpoint):
    from tracerl.orchestration.rounds.config import load_config

    text = (DEPLOY / "round.toml").read_text().replace('model = "policy-v0"', f'model = "{tiny_checkpoint}"')
    (tmp_path / "round.toml").write_text(text)
    config = load_config(tmp_path / "round.toml")
    assert config.state == tmp_path / "rounds" and config.build.splits == ("train",) and config.endpoints[0].kind == "vllm"
