"""The loop's command line (``tracerl demo``, ``python -m examples.X.train``) is its config: every
``LocalConfig`` field that declares an option is one, defaulting to the recipe's value, and comes back
into the config unchanged; options that cannot run together are refused before anything is built,
naming the option to change."""

from __future__ import annotations

from dataclasses import fields, replace

import pytest
import typer
from typer.testing import CliRunner

from examples.calc.recipe import RECIPE as CALC
from tracerl.cli import app
from tracerl.core.dataclass_options import OPTION, config_from_options
from tracerl.orchestration.demo.recipe import DEMO
from tracerl.orchestration.local.cli import recipe_app
from tracerl.orchestration.local.config import LocalConfig
from tracerl.trainer.serving.vllm_process import VllmOptions
from tracerl.trainer.training.options import pop_training_overrides


def test_lora_rounds_on_the_built_in_server_are_refused_at_once(tmp_path):
    result = CliRunner().invoke(app, ["demo", "--out", str(tmp_path / "run"), "--lora-rank", "8"], env={"COLUMNS": "300"})
    assert result.exit_code == 2
    assert "use --server vllm" in result.output and "--server" in result.output
    assert not (tmp_path / "run" / "policy").exists()  # nothing trained, nothing written beyond the run folder


def test_an_unknown_server_is_named(tmp_path):
    result = CliRunner().invoke(app, ["demo", "--out", str(tmp_path / "run"), "--server", "triton"], env={"COLUMNS": "300"})
    assert result.exit_code == 2 and "'triton' is not one of tracerl, vllm" in result.output


def parsed(recipe, argv: list[str]) -> LocalConfig:
    """What the recipe's command line makes of ``argv``: click parses it, the config takes the options back."""
    command = typer.main.get_command(recipe_app(recipe))
    params = command.make_context("train", argv).params
    pop_training_overrides(params)
    return config_from_options(recipe.defaults, params)


def test_no_option_given_is_the_recipe_s_own_config():
    for recipe in (DEMO, CALC):
        assert parsed(recipe, []) == recipe.defaults


def test_every_declared_field_is_an_option_and_comes_back_into_the_config(tmp_path):
    rubric = tmp_path / "rubric.txt"
    rubric.write_text("score it")
    cfg = parsed(DEMO, [
        "--out", str(tmp_path / "run"), "--rounds", "3", "--tasks-per-round", "5", "--group-size", "6", "--temperature", "0.7", "--eval-tasks", "7", "--seed", "9",
        "--model", "some/model", "--data", str(tmp_path), "--server", "vllm", "--tool-call-parser", "hermes", "--credit", "discounted", "--gamma", "0.5", "--trajectory",
        "--no-air", "--agents", "", "--policy", "writer=a,b", "--policy", "checker=c", "--replay", "--keep-checkpoints", "4", "--max-tokens", "64",
        "--agent-args", "--reflect-on-tool-use --x 'two words'", "--concurrency", "8", "--judge-url", "http://judge", "--judge-model", "j",
        "--judge-rubric", str(rubric), "--shuffle-rewards", "--vllm-dtype", "bf16", "--cuda-graphs", "--gpu-memory-utilization", "0.4",
        "--max-model-len", "2048", "--drop-zero-advantage",
    ])
    assert cfg == replace(
        DEMO.defaults, out=tmp_path / "run", rounds=3, tasks_per_round=5, group_size=6, temperature=0.7, eval_tasks=7, seed=9, model="some/model", data=tmp_path,
        server="vllm", tool_call_parser="hermes", credit="discounted", gamma=0.5, trajectory=True, air=False, agents="",
        policies={"writer": ("a", "b"), "checker": ("c",)}, replay=True, keep_checkpoints=4, max_tokens=64,
        agent_args=("--reflect-on-tool-use", "--x", "two words"), concurrency=8, judge_url="http://judge", judge_model="j",
        judge_rubric=rubric, shuffle_rewards=True, drop_zero_advantage=True, vllm=VllmOptions(dtype="bf16", enforce_eager=False, gpu_memory_utilization=0.4, max_model_len=2048),
    )
    declared = {f.name for f in fields(LocalConfig) if OPTION in f.metadata} | {f"vllm_{f.name}" for f in fields(VllmOptions)}
    given = {name for name in declared if getattr(cfg, name, None) != getattr(DEMO.defaults, name, None)}
    assert given | {f"vllm_{f.name}" for f in fields(VllmOptions)} == declared  # the call above gave every option a value of its own


def test_keep_checkpoints_means_what_it_means_in_rounds_0_keeps_all():
    assert parsed(DEMO, ["--keep-checkpoints", "0"]).keep_checkpoints == 0


def test_a_bad_policy_is_named_with_its_option():
    with pytest.raises(typer.BadParameter, match="NAME=AGENT") as raised:
        parsed(DEMO, ["--policy", "writer"])
    assert raised.value.param_hint == "--policy"


def test_agents_and_policy_are_the_build_s_own_options_meaning_what_they_mean_there():
    """The loop's ``--agents writer,rewriter`` (the SQL recipe's default) and a build's are one option: a regular
    expression searched in the agent name, or names joined by commas for exactly those."""
    from tracerl.pipeline.options import BuildOptions

    by_name = {f.name: f for f in fields(LocalConfig)}
    assert by_name["agents"].metadata[OPTION] is {f.name: f for f in fields(BuildOptions)}["agents"].metadata[OPTION]
    assert by_name["policies"].metadata[OPTION].declarations == ("--policy",)
    assert parsed(DEMO, ["--agents", "^tool_"]).agents == "^tool_"
    assert BuildOptions(agents=parsed(CALC, ["--agents", "writer,rewriter"]).agents).agents == "^(writer|rewriter)$"
