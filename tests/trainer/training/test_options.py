"""The training options every command takes: shared ones, and each backend's own, made from its options dataclass."""

from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner

from tracerl.trainer.training import cli
from tracerl.trainer.training.config import OpenRLHFOptions, TorchOptions, TrainConfig
from tracerl.trainer.training.options import TrainingOverrides, training_parameters


def _train(*args: str):
    app = typer.Typer()
    cli.register(app)
    return CliRunner().invoke(app, ["train", *args], env={"COLUMNS": "400"})


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
