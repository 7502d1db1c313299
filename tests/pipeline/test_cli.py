"""`tracerl pipeline build-dataset`, `doctor` and `judge`, whose options are their configs' fields, and the `pipeline` console script."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import asdict, fields
from pathlib import Path

import typer
from typer import _click as click  # typer 0.29 carries its own click: its commands are that click's
from typer.testing import CliRunner

from tracerl.cli import app
from tracerl.core.dataclass_options import OPTION, config_from_options
from tracerl.pipeline import BuildOptions, dataset_table, read_manifest
from tracerl.pipeline.cli import app as pipeline_app
from tracerl.pipeline.judge_options import JudgeOptions
from tracerl.pipeline.judge_prompt import DEFAULT_RUBRIC
from tracerl.pipeline.options import SELECTION
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


def parsed(command: str, argv: list[str]) -> dict:
    """What `tracerl pipeline COMMAND` makes of ``argv``: click parses it with the options the command was given."""
    group = typer.main.get_command(pipeline_app)
    return group.get_command(click.Context(group), command).make_context(command, argv).params


EVERY_BUILD_OPTION = [
    "--credit", "discounted", "--gamma", "0.9", "--advantage", "rloo", "--agents", "^solver$", "--split", "train", "--split", "eval",
    "--policy-versions", ">=2", "--rewards", "late.parquet", "--reward-weight", "correctness=0.9", "--no-evaluation-rewards",
    "--evaluation", "toxicity", "--rules", "rules.toml", "--no-default-rules", "--episode-timeout", "60", "--trajectory",
    "--incremental", "--export", "hf", "--export", "sft", "--sft-min-reward", "0.7", "--dpo-min-margin", "0.2", "--retokenize", "model",
    "--duckdb-threads", "3", "--memory-limit", "1GB",
]


def test_every_build_option_is_a_flag_of_build_dataset_and_comes_back_into_the_options():
    params = parsed("build-dataset", ["--spans", "data", "--out", "o", *EVERY_BUILD_OPTION])
    options = config_from_options(BuildOptions(), params)
    assert options == BuildOptions(
        credit="discounted", gamma=0.9, advantage="rloo", agents="^solver$", splits=("train", "eval"), policy_versions=">=2",
        rewards=("late.parquet",), reward_weights={"correctness": 0.9}, evaluation_rewards=False, evaluations=("toxicity",),
        rules="rules.toml", default_rules=False, episode_timeout_s=60.0, trajectory=True, incremental=True, exports=("hf", "sft"),
        sft_min_reward=0.7, dpo_min_margin=0.2, retokenize="model", threads=3, memory_limit="1GB",
    )
    unchanged = {f.name for f in fields(BuildOptions) if getattr(options, f.name) == getattr(BuildOptions(), f.name)}
    assert unchanged == {"policies"}  # given alone below: it cannot go with --agents
    assert config_from_options(BuildOptions(), parsed("build-dataset", ["--spans", "d", "--out", "o", "--policy", "w=a,b"])).policies == {"w": ("a", "b")}
    assert all(OPTION in f.metadata for f in fields(BuildOptions))  # each knob of a build is a flag


def test_the_former_threads_flag_of_a_build_still_sets_duckdb_s_threads_with_a_warning(capsys):
    """--threads is torch's threads in train, serve and the loop; a build's became --duckdb-threads, and old commands keep working."""
    params = parsed("build-dataset", ["--spans", "d", "--out", "o", "--threads", "3"])
    assert config_from_options(BuildOptions(), params).threads == 3
    assert "warning: --threads is deprecated here: use --duckdb-threads" in capsys.readouterr().err
    params = parsed("build-dataset", ["--spans", "d", "--out", "o", "--duckdb-threads", "2"])
    assert config_from_options(BuildOptions(), params).threads == 2 and capsys.readouterr().err == ""


def test_doctor_takes_the_selection_options_meaning_what_they_mean_in_a_build():
    selection = ["--advantage", "none", "--agents", "solver", "--split", "train", "--policy-versions", "3", "--rewards", "r.csv",
                 "--reward-weight", "r=2", "--evaluation", "x", "--rules", "rules.json", "--no-default-rules", "--episode-timeout", "5",
                 "--retokenize", "model", "--no-evaluation-rewards"]
    doctor = config_from_options(BuildOptions(), parsed("doctor", ["--spans", "d", *selection]))
    build = config_from_options(BuildOptions(), parsed("build-dataset", ["--spans", "d", "--out", "o", *selection]))
    assert doctor == build != BuildOptions()
    assert {f.name for f in fields(BuildOptions) if getattr(doctor, f.name) != getattr(BuildOptions(), f.name)} == set(SELECTION) - {"policies"}


def test_the_judge_s_defaults_are_its_options_dataclass_s(tmp_path):
    params = parsed("judge", ["--spans", "d", "--judge-url", "http://judge/v1", "--judge-model", "m"])
    given = {name: value for name, value in params.items() if name not in ("spans", "out")}
    assert config_from_options(JudgeOptions, given) == JudgeOptions(url="http://judge/v1", model="m")
    rubric = tmp_path / "rubric.txt"
    rubric.write_text("shorter is better", encoding="utf-8")
    params = parsed("judge", ["--spans", "d", "--judge-url", "u", "--judge-model", "m", "--rubric", str(rubric), "--split", "train",
                              "--max-group", "3", "--timeout", "5", "--episode-timeout", "60", "--evaluation-events"])
    options = config_from_options(JudgeOptions, {k: v for k, v in params.items() if k not in ("spans", "out")})
    assert (options.rubric, options.splits, options.max_group, options.timeout_s, options.episode_timeout_s, options.evaluation_events) == (
        "shorter is better", ("train",), 3, 5.0, 60.0, True)
    assert JudgeOptions(url="u", model="m").rubric == DEFAULT_RUBRIC


def test_agents_is_a_regex_searched_in_the_agent_name_and_names_joined_by_commas_are_those_names(data_dir, tmp_path):
    calls = [llm_call("e1", f"c{i}", i, i + 1, [1, 2], [3], agent=agent) for i, agent in enumerate(("writer", "rewriter", "checker"))]
    write_spans(data_dir, [episode_span("e1", 0, 100, task="t1"), *calls, reward_span("e1", "r", 20, 1.0)])

    def agents(selection: str) -> list[str]:
        out = tmp_path / selection.replace("^", "").replace("$", "").replace(",", "_")
        result = CliRunner().invoke(app, ["pipeline", "build-dataset", "--spans", str(data_dir), "--out", str(out), "--agents", selection])
        assert result.exit_code == 0, result.output
        return sorted(dataset_table(out).column("agent_name").to_pylist())

    assert agents("writer") == ["rewriter", "writer"]  # a pattern matches anywhere in a name
    assert agents("^writer$") == ["writer"]
    assert agents("writer,checker") == ["checker", "writer"]  # a list of names: exactly those
    assert BuildOptions(agents="writer, checker").agents == "^(writer|checker)$"
    refused = CliRunner().invoke(app, ["pipeline", "doctor", "--spans", str(data_dir), "--agents", "writer("])
    assert refused.exit_code == 2 and "--agents 'writer(' is not a valid regular expression" in refused.output
