"""The backends table: a row per backend (its trainer class and options type), and the one way to get a trainer."""

from __future__ import annotations

import pkgutil

import pytest

from tracerl.trainer.training.backend import PolicyGradientTrainer
from tracerl.trainer.training.backends import BACKENDS, DEFAULT_BACKEND, UnknownBackend, backend_named, load_trainer
from tracerl.trainer.training.config import OpenRLHFOptions, TorchOptions, TrainConfig
from tracerl.trainer.training.torch_backend import PolicyTrainer


def test_each_row_names_a_trainer_class_and_the_first_is_the_default():
    assert list(BACKENDS) == ["torch", "openrlhf"] and DEFAULT_BACKEND == "torch"
    for row in BACKENDS.values():  # the class is imported only here, when a trainer is made (torch, DeepSpeed)
        assert issubclass(pkgutil.resolve_name(row.trainer), PolicyGradientTrainer)


def test_an_unknown_backend_is_refused_naming_the_backends(tiny_checkpoint):
    with pytest.raises(UnknownBackend, match="unknown backend 'jax': use torch or openrlhf"):
        load_trainer("jax", tiny_checkpoint)
    with pytest.raises(ValueError, match="use torch or openrlhf"):
        backend_named("Torch")


def test_a_backend_gets_its_own_options_type_or_its_defaults(tiny_checkpoint):
    trainer = load_trainer("torch", tiny_checkpoint, TrainConfig(seed=3))
    assert isinstance(trainer, PolicyTrainer) and trainer.config.seed == 3
    with pytest.raises(TypeError, match="backend 'torch' takes TorchOptions, got OpenRLHFOptions"):
        load_trainer("torch", tiny_checkpoint, options=OpenRLHFOptions(zero_stage=3))


def test_the_manifest_records_a_backends_options_under_its_name():
    openrlhf, torch = backend_named("openrlhf"), backend_named("torch")
    assert openrlhf.options_record(OpenRLHFOptions(zero_stage=3))["openrlhf"]["zero_stage"] == 3
    assert openrlhf.options_record()["openrlhf"] == {"zero_stage": 2, "adam_offload": False, "lora_target_modules": "all-linear",
                                                     "reference_model": None, "kl_coef": 0.0}  # None: the defaults it ran with
    assert torch.options_record(TorchOptions()) == {}  # no options of its own, nothing recorded


def test_backend_options_check_themselves_when_built():
    with pytest.raises(ValueError, match="pass --ref-model too"):
        OpenRLHFOptions(kl_coef=0.1)
