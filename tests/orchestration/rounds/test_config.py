"""A round's configuration is ``RoundConfig``'s fields: each a key of the TOML file, and where it declares an option a
flag of ``train run`` and ``train loop``; the field's default, then the file, then the command line. A bad key, type or
bound is refused naming the file, the table and the key."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from typer import _click as click  # typer 0.29 carries its own click: its commands are that click's

from tracerl.cli import build_app
from tracerl.orchestration.rounds.cli import _config_from_options
from tracerl.orchestration.rounds.config import Endpoint, RoundConfig, RoundConfigError, load_config
from tracerl.pipeline.options import BuildOptions


@pytest.fixture
def model(tmp_path: Path) -> Path:
    """A folder a round takes as its starting policy (a Hugging Face checkpoint: it has a config.json)."""
    folder = tmp_path / "policy-v0"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    return folder


def from_command_line(command: str, argv: list[str]) -> RoundConfig:
    """What ``tracerl train COMMAND ARGV`` runs its rounds with: click parses the flags, the round reads its file under them."""
    root = typer.main.get_command(build_app("train"))
    train = root.get_command(click.Context(root), "train")
    params = dict(train.get_command(click.Context(train), command).make_context(command, argv).params)
    params.pop("every", None)  # the loop's own
    return _config_from_options(params)


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_the_command_line_overrides_the_file_which_overrides_the_defaults(tmp_path, model):
    config = write(tmp_path / "round.toml", f"""
spans = "data"
state = "state"
model = "{model}"
min_episodes = 64
keep_checkpoints = 5

[build]
splits = ["train"]
agents = "solver"
credit = "discounted"

[train]
epochs = 3

[[endpoint]]
url = "http://127.0.0.1:8000/v1"
kind = "vllm"
""")
    from_file = from_command_line("run", ["--config", str(config)])
    assert (from_file.spans, from_file.state, from_file.model) == (str(tmp_path / "data"), tmp_path / "state", model)  # beside the file
    assert (from_file.min_episodes, from_file.keep_checkpoints, from_file.gate_margin) == (64, 5, 0.0)  # gate_margin: the default
    assert from_file.build == BuildOptions(splits=("train",), agents="solver", credit="discounted", incremental=True)
    assert from_file.train.epochs == 3 and from_file.endpoints == (Endpoint("http://127.0.0.1:8000/v1", "vllm"),)

    flags = from_command_line("loop", ["--every", "10m", "--config", str(config), "--min-episodes", "8", "--split", "eval",
                                       "--agents", "writer,checker", "--endpoint", "http://other/v1", "--epochs", "1"])
    assert (flags.min_episodes, flags.keep_checkpoints) == (8, 5)
    assert flags.build == BuildOptions(splits=("eval",), agents="^(writer|checker)$", credit="discounted", incremental=True)
    assert flags.train.epochs == 1 and flags.endpoints == (Endpoint("http://other/v1", "tracerl"),)


def test_a_round_needs_no_file(tmp_path, model, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = from_command_line("run", ["--spans", "data", "--state", "state", "--model", str(model), "--policy", "writer=a,b", "--lora-rank", "8"])
    assert cfg.spans == str(tmp_path / "data") and cfg.policies == {"writer": ("a", "b")} and cfg.build.incremental
    with pytest.raises(RoundConfigError, match=r"the command line: missing state \(or --state\), model \(or --model\)"):
        from_command_line("run", ["--spans", "data"])


def test_policies_are_the_build_s_whether_a_table_of_the_file_or_flags(tmp_path, model):
    config = write(tmp_path / "round.toml", f'spans = "d"\nstate = "s"\nmodel = "{model}"\n[policies]\nwriter = ["writer", "rewriter"]\n')
    assert load_config(config).build.policies == {"writer": ("writer", "rewriter")}
    assert from_command_line("run", ["--config", str(config), "--policy", "checker=checker", "--lora-rank", "8"]).policies == {"checker": ("checker",)}
    with pytest.raises(RoundConfigError, match="--policy 'checker': write NAME=AGENT"):
        from_command_line("run", ["--config", str(config), "--policy", "checker"])


@pytest.mark.parametrize(("text", "says"), [
    ("colour = 1", "round.toml: unknown key(s) colour; known: backend, base_version, build, endpoint"),
    ("[build]\nsplit = 'train'", "round.toml [build]: unknown key(s) split; known: advantage, agents"),
    ("min_episodes = '64'", "round.toml: min_episodes must be an integer, got '64'"),
    ("min_episodes = 0", "round.toml: min_episodes must be at least 1, got 0"),  # the --min-episodes bound, declared once
    ("keep_checkpoints = -1", "round.toml: keep_checkpoints must be at least 0, got -1"),
    ("[openrlhf]\nzero_stage = 4", "round.toml [openrlhf]: zero_stage must be at most 3, got 4"),
    ("[train]\nepochs = 1.5", "round.toml [train]: epochs must be an integer, got 1.5"),
    ("[train]\nepochs = 0", "round.toml [train]: epochs must be at least 1, got 0"),  # the --epochs bound, declared once
    ("[build]\nagents = 'writer('", "round.toml [build]: --agents 'writer(' is not a valid regular expression"),
    ("[[endpoint]]\nkind = 'vllm'", "round.toml [[endpoint]]: missing url"),
    ("[[endpoint]]\nurl = 'http://x/v1'\nkind = 'triton'", "round.toml: endpoint http://x/v1: unknown kind 'triton'"),
    ("backend = 'jax'", "round.toml: backend: unknown backend 'jax': use torch or openrlhf"),
])
def test_a_bad_key_type_or_bound_is_refused_naming_the_file_table_and_key(tmp_path, model, text, says):
    config = write(tmp_path / "round.toml", f'spans = "d"\nstate = "s"\nmodel = "{model}"\n{text}\n')
    with pytest.raises(RoundConfigError) as refused:
        load_config(config)
    assert str(refused.value).startswith(says.replace("round.toml", str(config)))
