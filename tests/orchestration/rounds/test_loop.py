"""``tracerl train loop``: rounds repeated; SIGTERM stops it between phases, and what it leaves the next run finishes."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest

from tracerl.orchestration.rounds.cli import parse_period
from tracerl.orchestration.registry import PolicyRegistry


def test_sigterm_stops_the_loop_between_phases_and_the_next_run_finishes_that_round(tmp_path, capture, round_config, tracerl):
    capture(4)
    config = round_config()
    command = [sys.executable, "-m", "tracerl", "train", "loop", "--every", "1h", "--config", str(config)]
    loop = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in loop.stderr:
        if line.strip() == "tracerl round: train":
            loop.send_signal(signal.SIGTERM)  # while training: the loop stops before publishing
            break
    out, _ = loop.communicate(timeout=300)
    assert loop.returncode == 0
    assert json.loads(out.strip().splitlines()[-1]) == {"status": "stopped", "reason": "stopped before publish of round 1"}
    assert (tmp_path / "state" / "policies" / "v0001" / "config.json").exists()  # the phase it was in finished
    assert [e["version"] for e in PolicyRegistry(tmp_path / "state").entries()] == [0]

    done = tracerl("train", "run", "--config", str(config))
    assert done.returncode == 0 and done.summary["status"] == "trained" and done.summary["resumed"] == "publish"

    loop = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert json.loads(loop.stdout.readline())["status"] == "idle"  # then it sleeps until the next hour
    loop.send_signal(signal.SIGTERM)
    assert loop.wait(timeout=30) == 0
    assert json.loads(loop.stdout.read().strip()) == {"status": "stopped", "reason": "stopped between rounds"}


@pytest.mark.parametrize(("text", "seconds"), [("10m", 600), ("30s", 30), ("1.5h", 5400), ("45", 45)])
def test_periods_read_as_a_crontab_reader_expects(text, seconds):
    assert parse_period(text) == seconds


def test_a_period_without_a_number_is_refused_with_examples():
    import typer

    with pytest.raises(typer.BadParameter, match="write e.g. 30s, 10m or 1h"):
        parse_period("ten minutes")
