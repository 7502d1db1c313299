"""The training options every command takes: ``TrainConfig``'s, and each backend's own, each made from the field
that declares it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import fields, replace

import pytest
import typer
from typer import _click as click  # typer 0.29 carries its own click: its commands are that click's
from typer.testing import CliRunner

from tracerl.cli import build_app
from tracerl.core.commands import command_group
from tracerl.core.dataclass_options import OPTION
from tracerl.orchestration.demo.recipe import DEMO
from tracerl.orchestration.local.cli import recipe_app
from tracerl.trainer.training import cli
from tracerl.trainer.training.config import OpenRLHFOptions, TorchOptions, TrainConfig
from tracerl.trainer.training.options import TrainingOverrides, pop_training_overrides, training_parameters


def _train(*args: str):
    """``tracerl train`` under a root made as the real one is: Click's plain help and errors, which no terminal
    setting boxes (a bare ``typer.Typer()`` root renders through rich, 80 columns wide on CI's TERM=dumb)."""
    app = command_group()
    cli.register(app)
    return CliRunner().invoke(app, ["train", *args], env={"COLUMNS": "400"})


def commands_that_train() -> Iterator[tuple[str, click.Command]]:
    root = typer.main.get_command(build_app())
    train = root.get_command(click.Context(root), "train")
    yield "tracerl train", train
    for name in ("run", "loop"):
        yield f"tracerl train {name}", train.get_command(click.Context(train), name)
    yield "tracerl demo", root.get_command(click.Context(root), "demo")


def test_every_command_that_trains_takes_the_same_training_flags_with_the_same_help():
    """Each flag is a field of TrainConfig (or of a backend's options) declared once: `tracerl train`, the scheduled
    rounds and the local loop cannot drift apart, and nesting a TrainConfig in a round or loop config adds no second one."""
    names = {p.name for p in training_parameters()}
    seen = {}
    for path, command in commands_that_train():
        flags = [name for param in command.params for name in (*param.opts, *param.secondary_opts)]
        assert len(flags) == len(set(flags)), path  # no flag twice
        seen[path] = {param.name: (param.opts, param.secondary_opts, param.help) for param in command.params if param.name in names}
    assert all(taken == seen["tracerl train"] for taken in seen.values())
    declared = {f.metadata[OPTION].declarations[0].split("/")[0] for f in fields(TrainConfig) if OPTION in f.metadata}
    assert declared == {"--lr", "--epochs", "--minibatch-size", "--micro-batch-size", "--micro-batch-tokens", "--rollout-temperature",
                        "--clip", "--threads", "--dtype", "--gradient-checkpointing", "--logprob-chunk", "--lora-rank", "--lora-alpha",
                        "--report-to"}  # the flags users' commands have always given
    assert declared <= {opts[0] for opts, _, _ in seen["tracerl train"].values()}


def test_each_training_flag_comes_back_into_the_train_config_over_the_callers():
    argv = ["--lr", "0.5", "--epochs", "3", "--minibatch-size", "8", "--micro-batch-size", "2", "--micro-batch-tokens", "100",
            "--rollout-temperature", "0.7", "--clip", "0.1", "--threads", "2", "--dtype", "bf16", "--no-gradient-checkpointing",
            "--logprob-chunk", "64", "--lora-rank", "4", "--lora-alpha", "8", "--report-to", "tensorboard,mlflow"]
    command = dict(commands_that_train())["tracerl train"]
    training = pop_training_overrides(dict(command.make_context("train", argv).params))
    callers = TrainConfig(seed=3, max_grad_norm=0.5)  # what the command trains with: a round file's [train], a recipe's
    assert training.apply("torch", callers, {})[1] == TrainConfig(
        learning_rate=0.5, epochs=3, minibatch_size=8, micro_batch_size=2, micro_batch_tokens=100, rollout_temperature=0.7,
        clip_epsilon=0.1, num_threads=2, dtype="bf16", gradient_checkpointing=False, logprob_chunk=64, lora_rank=4, lora_alpha=8,
        report_to=("tensorboard", "mlflow"), seed=3, max_grad_norm=0.5)
    assert TrainingOverrides({}).apply("torch", callers, {})[1] == callers  # nothing given changes nothing


def test_a_bad_training_value_is_refused_naming_its_flag():
    done = _train("--dataset", "ds", "--model", "m", "--out", "o", "--dtype", "fp8")
    assert done.exit_code == 2 and "'fp8' is not one of bf16, fp16, fp32" in done.output
    with pytest.raises(typer.BadParameter, match="unknown tracker") as raised:
        TrainingOverrides({"report_to": "tensorbored"}).apply("torch", TrainConfig(), {})
    assert raised.value.param_hint == "--report-to"


def test_each_flag_s_help_names_the_default_of_the_command_s_own_config():
    """A recipe trains with its own TrainConfig: its --help names those values, not the class's."""
    recipe = replace(DEMO, defaults=replace(DEMO.defaults, train=TrainConfig(epochs=5, lora_rank=8)))
    helps = {param.name: param.help for param in typer.main.get_command(recipe_app(recipe)).params}
    assert helps["epochs"].endswith("[default: 5]") and helps["lora_rank"].endswith("[default: 8]")
    train = dict(commands_that_train())["tracerl train"]
    assert {param.name: param.help for param in train.params}["epochs"].endswith(f"[default: {TrainConfig.epochs}]")


def test_a_backends_flags_come_from_its_options_dataclass():
    flags = [declaration for p in training_parameters() for declaration in p.default.param_decls]
    assert len(flags) == len(set(flags))  # no flag declared twice, whatever the backends
    assert {"--zero-stage", "--adam-offload/--no-adam-offload", "--ref-model", "--kl-coef"} <= set(flags)
    help_text = _train("--help").output
    assert "openrlhf: DeepSpeed ZeRO stage" in help_text and "torch (default): one process" in help_text


def test_flags_of_the_chosen_backend_build_its_options_over_the_callers():
    """A round's file gave [openrlhf] adam_offload; the command line gives --backend openrlhf --zero-stage 3."""
    from_file = {"openrlhf": OpenRLHFOptions(adam_offload=True)}
    given = TrainingOverrides({"backend": "openrlhf", "openrlhf_zero_stage": 3, "openrlhf_reference_model": None, "epochs": 1})
    backend, config, options = given.apply("torch", TrainConfig(), from_file)
    assert backend == "openrlhf" and config.epochs == 1
    assert options == {"openrlhf": OpenRLHFOptions(zero_stage=3, adam_offload=True)}
    assert TrainingOverrides({}).apply("torch", TrainConfig(), {}) == ("torch", TrainConfig(), {"torch": TorchOptions()})


def test_an_unknown_backend_or_a_flag_of_another_backend_is_refused_naming_it():
    with pytest.raises(typer.BadParameter, match="unknown backend 'jax': use torch or openrlhf") as raised:
        TrainingOverrides({"backend": "jax"}).apply("torch", TrainConfig(), {})
    assert raised.value.param_hint == "--backend"
    done = _train("--dataset", "ds", "--model", "m", "--out", "o", "--zero-stage", "3", "--kl-coef", "0.1")
    assert done.exit_code == 2 and "--zero-stage, --kl-coef are options of --backend openrlhf, not of torch" in done.output


def test_a_backends_own_check_names_its_flags():
    with pytest.raises(typer.BadParameter, match="pass --ref-model too") as raised:
        TrainingOverrides({"backend": "openrlhf", "openrlhf_kl_coef": 0.1}).apply("torch", TrainConfig(), {})
    assert raised.value.param_hint == "--kl-coef"
    given = TrainingOverrides({"backend": "openrlhf", "openrlhf_kl_coef": 0.1, "openrlhf_reference_model": "ref"})
    assert given.apply("torch", TrainConfig(), {})[2]["openrlhf"].reference_model == "ref"
