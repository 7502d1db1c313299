"""`tracerl pipeline build-dataset` and the `pipeline` console script."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

from typer.testing import CliRunner

from tracerl.cli import app
from tracerl.pipeline import BuildOptions, read_manifest
from tracerl_testing.span_builders import episode_span, llm_call, reward_span, write_spans


def _spans(data_dir):
    return write_spans(data_dir, [
        episode_span("e1", 0, 100, task="t1"), llm_call("e1", "c1", 1, 10, [1, 2], [3]), reward_span("e1", "r", 20, 1.0),
        episode_span("e2", 0, 100, task="t1"), llm_call("e2", "c1", 1, 10, [1, 2], [4]), reward_span("e2", "r", 20, 0.0),
    ])


def test_build_dataset_command_writes_transitions_and_manifest(data_dir, tmp_path):
    _spans(data_dir)
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["pipeline", "build-dataset", "--spans", str(data_dir), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "2 transition(s) from 2 episode(s)" in result.output
    assert read_manifest(out)["counts"]["rows_written"] == 2


def test_the_command_line_defaults_are_build_options_defaults(data_dir, tmp_path):
    _spans(data_dir)
    result = CliRunner().invoke(app, ["pipeline", "build-dataset", "--spans", str(data_dir), "--out", str(tmp_path / "o")])
    assert result.exit_code == 0, result.output
    recorded = read_manifest(tmp_path / "o")["parameters"]
    assert {k: v for k, v in recorded.items() if k != "air_rules"} == json.loads(json.dumps(asdict(BuildOptions())))


def test_a_credit_that_does_not_exist_is_refused_before_reading_data(data_dir, tmp_path):
    result = CliRunner().invoke(app, ["pipeline", "build-dataset", "--spans", str(data_dir), "--out", str(tmp_path / "o"),
                                      "--credit", "magic"])
    assert result.exit_code == 2 and "credit must be one of identical, discounted, got 'magic'" in result.output


def test_missing_folder_exits_2_with_a_message(tmp_path):
    result = CliRunner().invoke(app, ["pipeline", "build-dataset", "--spans", str(tmp_path / "nope"), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and "does not exist" in result.output


def test_empty_dataset_exits_1_and_points_to_doctor(tmp_path):
    (tmp_path / "spans").mkdir()
    result = CliRunner().invoke(app, ["pipeline", "build-dataset", "--spans", str(tmp_path / "spans"), "--out", str(tmp_path / "o")])
    assert result.exit_code == 1
    assert "no readable span files" in result.output and "doctor" in result.output


def test_bad_reward_weight_is_rejected(data_dir, tmp_path):
    _spans(data_dir)
    result = CliRunner().invoke(app, ["pipeline", "build-dataset", "--spans", str(data_dir), "--out", str(tmp_path / "o"),
                                      "--reward-weight", "correctness"])
    assert result.exit_code == 2 and "NAME=WEIGHT" in result.output


def test_pipeline_console_script_equals_tracerl_pipeline(data_dir, tmp_path):
    _spans(data_dir)
    # the script sits next to this interpreter: the venv need not be activated (CI runs .venv/bin/pytest)
    script = shutil.which("pipeline", path=str(Path(sys.executable).parent))
    assert script, "the `pipeline` console script is not installed (pip install -e .)"
    done = subprocess.run([script, "build-dataset", "--spans", str(data_dir), "--out", str(tmp_path / "o")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert len(list((tmp_path / "o").glob("transitions-*.parquet"))) == 1
