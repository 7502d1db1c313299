"""The training options every command takes, declared once.

``tracerl train``, ``tracerl train run`` / ``train loop``, ``tracerl demo`` and each
``python -m examples.X.train`` take them (:func:`with_training_options`, or :func:`training_parameters` in a signature built from a config): the same
``--backend``, ``--lr``, ``--micro-batch-size``, ``--lora-rank``, ... with the same help, and
the command receives a :class:`TrainingOverrides` holding what the user gave. Each command
applies it over its own defaults (``TrainConfig()``, a round's TOML ``[train]``, a recipe's
``LocalConfig``), so an option means the same thing everywhere and nothing given changes nothing.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Optional

import typer

from tracerl.trainer.trackers import parse_report_to
from tracerl.trainer.training.config import BACKENDS, FULL_WEIGHTS_LEARNING_RATE, LORA_LEARNING_RATE, OpenRLHFOptions, TrainConfig

# option name -> (TrainConfig or OpenRLHFOptions field, typer.Option); every default None: "not given"
_OPTIONS: dict[str, tuple[str | None, Any, Any]] = {
    "backend": (None, Optional[str], typer.Option(None, "--backend", help=f"{' or '.join(BACKENDS)} (default torch): torch trains in one process, openrlhf on DeepSpeed (ZeRO, many GPUs).")),
    "learning_rate": ("learning_rate", Optional[float], typer.Option(
        None, "--lr", min=0.0,
        help=f"Learning rate (default: {FULL_WEIGHTS_LEARNING_RATE:g} for full weights, {LORA_LEARNING_RATE:g} for LoRA; a recipe's tiny model has its own). 0: the same run without learning.")),
    "epochs": ("epochs", Optional[int], typer.Option(None, "--epochs", min=1, help="Passes over each round's samples.")),
    "minibatch_size": ("minibatch_size", Optional[int], typer.Option(None, "--minibatch-size", min=1, help="Samples per optimizer step, over all processes.")),
    "micro_batch_size": ("micro_batch_size", Optional[int], typer.Option(
        None, "--micro-batch-size", min=1, help="Samples per forward/backward of one process; gradients accumulate to the minibatch (bounds memory).")),
    "micro_batch_tokens": ("micro_batch_tokens", Optional[int], typer.Option(
        None, "--micro-batch-tokens", min=1,
        help="Padded tokens (rows x longest row) per forward/backward, whatever --micro-batch-size says (default: 4096 on CPU, 16384 on CUDA).")),
    "rollout_temperature": ("rollout_temperature", Optional[float], typer.Option(
        None, "--rollout-temperature", min=0.0,
        help="The temperature the training samples were drawn at (default 1): the trainer's log-probs are the tempered policy's, as sampled "
             "(the local loop sets it from its --temperature).")),
    "num_threads": ("num_threads", Optional[int], typer.Option(
        None, "--threads", min=1, help="torch threads while training on CPU (default 1: small models lose to thread hand-offs; a 135M model trains ~2x faster on 2).")),
    "clip_epsilon": ("clip_epsilon", Optional[float], typer.Option(None, "--clip", min=0.0, help="PPO clip range of the ratio to the round's starting policy.")),
    "dtype": ("dtype", Optional[str], typer.Option(None, "--dtype", help="bf16, fp16 or fp32 (default: bf16 with CUDA, fp32 without).")),
    "gradient_checkpointing": ("gradient_checkpointing", Optional[bool], typer.Option(
        None, "--gradient-checkpointing/--no-gradient-checkpointing", help="Recompute activations in the backward pass (default: on with CUDA).")),
    "logprob_chunk": ("logprob_chunk", Optional[int], typer.Option(None, "--logprob-chunk", min=1, help="Tokens of a micro-batch whose logits exist at once (bounds the output head's memory).")),
    "lora_rank": ("lora_rank", Optional[int], typer.Option(None, "--lora-rank", min=0, help="Train a LoRA adapter of this rank instead of the full weights.")),
    "lora_alpha": ("lora_alpha", Optional[int], typer.Option(None, "--lora-alpha", min=1, help="LoRA scale numerator.")),
    "report_to": ("report_to", Optional[str], typer.Option(
        None, "--report-to", metavar="TRACKERS",
        help="Report each round's metrics, the config and the reward curve to these trackers: comma-separated mlflow, tensorboard, "
             "trackio, wandb; all (every one installed) or none (the default). pip install 'tracerl[trackers]'.")),
    "zero_stage": ("zero_stage", Optional[int], typer.Option(None, "--zero-stage", min=0, max=3, help="openrlhf: DeepSpeed ZeRO stage (default 2).")),
    "adam_offload": ("adam_offload", Optional[bool], typer.Option(
        None, "--adam-offload/--no-adam-offload", help="openrlhf: keep Adam's moments and fp32 weights in host memory (full weights of a 7B model on one GPU).")),
    "ref_model": ("reference_model", Optional[Path], typer.Option(None, "--ref-model", help="openrlhf: frozen reference policy of a KL penalty (with --kl-coef).")),
    "kl_coef": ("kl_coef", Optional[float], typer.Option(None, "--kl-coef", min=0.0, help="openrlhf: weight of the k3 KL to --ref-model.")),
}
_OPENRLHF_ONLY = ("zero_stage", "adam_offload", "ref_model", "kl_coef")


@dataclass(frozen=True)
class TrainingOverrides:
    """What the user gave on the command line (None: not given)."""

    values: dict[str, Any] = field(default_factory=dict)

    @property
    def backend(self) -> str | None:
        return self.values.get("backend")

    def apply(self, backend: str, config: TrainConfig, options: OpenRLHFOptions) -> tuple[str, TrainConfig, OpenRLHFOptions]:
        """``(backend, config, options)`` with the given values on top; raises ``typer.BadParameter`` naming the option."""
        backend = self.backend or backend
        if backend not in BACKENDS:
            raise typer.BadParameter(f"unknown backend {backend!r}: use {' or '.join(BACKENDS)}", param_hint="--backend")
        given = {name: value for name, value in self.values.items() if value is not None and name != "backend"}
        if backend != "openrlhf":
            misplaced = [name for name in _OPENRLHF_ONLY if name in given]
            if misplaced:
                flags = ", ".join(_OPTIONS[n][2].param_decls[0] for n in misplaced)
                raise typer.BadParameter(f"{flags} are options of --backend openrlhf", param_hint="--backend")
        if given.get("dtype") not in (None, "bf16", "fp16", "fp32"):
            raise typer.BadParameter(f"{given['dtype']!r}: use bf16, fp16 or fp32", param_hint="--dtype")
        if "report_to" in given:
            try:
                given["report_to"] = parse_report_to(given["report_to"])
            except ValueError as exc:
                raise typer.BadParameter(str(exc), param_hint="--report-to") from None
        train_fields = {f for f in TrainConfig.__dataclass_fields__}
        config = replace(config, **{_OPTIONS[n][0]: v for n, v in given.items() if _OPTIONS[n][0] in train_fields})
        options = replace(options, **{_OPTIONS[n][0]: (str(v) if n == "ref_model" else v) for n, v in given.items() if _OPTIONS[n][0] in OpenRLHFOptions.__dataclass_fields__})
        if options.kl_coef > 0 and options.reference_model is None:
            raise typer.BadParameter("a KL penalty needs the policy to stay close to: pass --ref-model too", param_hint="--kl-coef")
        return backend, config, options


def training_parameters() -> list[inspect.Parameter]:
    """The training options as keyword parameters, for a command's ``__signature__``."""
    return [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=annotation) for name, (_, annotation, option) in _OPTIONS.items()]


def pop_training_overrides(kwargs: dict[str, Any]) -> TrainingOverrides:
    """Take the training options out of a command's keyword arguments."""
    return TrainingOverrides({name: kwargs.pop(name, None) for name in _OPTIONS})


def with_training_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Give ``command`` (which takes ``training: TrainingOverrides``) every training option."""
    signature = inspect.signature(command)
    own = [p for p in signature.parameters.values() if p.name != "training"]
    shared = training_parameters()

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        training = pop_training_overrides(kwargs)
        return command(*args, training=training, **kwargs)

    wrapper.__signature__ = signature.replace(parameters=[*own, *shared])  # type: ignore[attr-defined]
    return wrapper
