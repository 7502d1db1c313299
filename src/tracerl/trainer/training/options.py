"""The training options every command takes, declared once.

``tracerl train``, ``tracerl train run`` / ``train loop``, ``tracerl demo`` and each
``python -m examples.X.train`` take them (:func:`with_training_options`, or :func:`training_parameters` in a signature built from a config): the same
``--backend``, ``--lr``, ``--micro-batch-size``, ``--lora-rank``, ... with the same help, and
the command receives a :class:`TrainingOverrides` holding what the user gave. Each command
applies it over its own defaults (``TrainConfig()``, a round's TOML ``[train]`` and backend
sections, a recipe's ``LocalConfig``), so an option means the same thing everywhere and nothing
given changes nothing. The options shared by every backend (:class:`TrainConfig`'s) are listed
here; each backend's own are the fields of its row's options dataclass that declare one
(:data:`~tracerl.trainer.training.backends.BACKENDS`), so a new backend brings its flags with it.
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, Optional

import typer

from tracerl.core.dataclass_options import OPTION, Option
from tracerl.trainer.trackers import parse_report_to
from tracerl.trainer.training.backends import BACKENDS, DEFAULT_BACKEND, UnknownBackend, backend_named
from tracerl.trainer.training.config import FULL_WEIGHTS_LEARNING_RATE, LORA_LEARNING_RATE, TrainConfig

_BACKEND_HELP = "; ".join(f"{name}{' (default)' if name == DEFAULT_BACKEND else ''}: {row.help}" for name, row in BACKENDS.items())

# option name -> (TrainConfig field, annotation, typer.Option); every default None: "not given"
_OPTIONS: dict[str, tuple[str | None, Any, Any]] = {
    "backend": (None, Optional[str], typer.Option(None, "--backend", help=f"{_BACKEND_HELP}.")),
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
}


@dataclass(frozen=True)
class _BackendOption:
    """A flag of one backend's own, declared by a field of its options dataclass."""

    backend: str
    field: str
    spec: Option
    annotation: Any  # Optional[...]: the parameter's default is None, "not given"


def _optional(annotation: Any) -> Any:
    """``annotation`` without None, as ``Optional[...]``: what typer reads for an option whose default is None."""
    args = typing.get_args(annotation)
    if type(None) in args:
        annotation = next(a for a in args if a is not type(None))
    return Optional[annotation]


def _backend_options() -> dict[str, _BackendOption]:
    """Each backend's own flags, keyed ``BACKEND_FIELD`` so that two backends' fields never share a parameter."""
    found = {}
    for row in BACKENDS.values():
        hints = typing.get_type_hints(row.options)
        for f in fields(row.options):
            if OPTION in f.metadata:
                spec: Option = f.metadata[OPTION]
                found[f"{row.name}_{f.name}"] = _BackendOption(row.name, f.name, spec, _optional(spec.cli_type or hints[f.name]))
    return found


_BACKEND_OPTIONS = _backend_options()


@dataclass(frozen=True)
class TrainingOverrides:
    """What the user gave on the command line (None: not given)."""

    values: dict[str, Any] = field(default_factory=dict)

    @property
    def backend(self) -> str | None:
        return self.values.get("backend")

    def apply(self, backend: str, config: TrainConfig, backend_options: Mapping[str, Any]) -> tuple[str, TrainConfig, dict[str, Any]]:
        """``(backend, config, backend_options)`` with the given values on top; raises ``typer.BadParameter`` naming the option.

        ``backend_options`` holds the caller's options of each backend by name (a recipe's, a round file's ``[NAME]``
        sections; none: that backend's defaults); it comes back with the chosen backend's entry made and the given flags
        of that backend applied. Flags of another backend are refused, naming the backend they belong to.
        """
        backend = self.backend or backend
        try:
            row = backend_named(backend)
        except UnknownBackend as exc:
            raise typer.BadParameter(str(exc), param_hint="--backend") from None
        given = {name: value for name, value in self.values.items() if value is not None and name != "backend"}
        misplaced = [_BACKEND_OPTIONS[n] for n in given if n in _BACKEND_OPTIONS and _BACKEND_OPTIONS[n].backend != backend]
        if misplaced:
            owners: dict[str, list[str]] = {}
            for o in misplaced:
                owners.setdefault(o.backend, []).append(o.spec.flag)
            said = "; ".join(f"{', '.join(flags)} {'is an option' if len(flags) == 1 else 'are options'} of --backend {owner}"
                             for owner, flags in owners.items())
            raise typer.BadParameter(f"{said}, not of {backend}", param_hint="--backend")
        if given.get("dtype") not in (None, "bf16", "fp16", "fp32"):
            raise typer.BadParameter(f"{given['dtype']!r}: use bf16, fp16 or fp32", param_hint="--dtype")
        if "report_to" in given:
            try:
                given["report_to"] = parse_report_to(given["report_to"])
            except ValueError as exc:
                raise typer.BadParameter(str(exc), param_hint="--report-to") from None
        config = replace(config, **{_OPTIONS[n][0]: v for n, v in given.items() if n in _OPTIONS})
        own = [(_BACKEND_OPTIONS[n], v) for n, v in given.items() if n in _BACKEND_OPTIONS]
        changes = {o.field: (o.spec.from_cli(v) if o.spec.from_cli else v) for o, v in own}
        try:
            options = replace(backend_options.get(backend) or row.options(), **changes)
        except ValueError as exc:  # the options' own check (e.g. a KL penalty without its reference model)
            raise typer.BadParameter(str(exc), param_hint=", ".join(o.spec.flag for o, _ in own) or "--backend") from None
        return backend, config, {**backend_options, backend: options}


def training_parameters() -> list[inspect.Parameter]:
    """The training options as keyword parameters, for a command's ``__signature__``."""
    shared = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=annotation) for name, (_, annotation, option) in _OPTIONS.items()]
    own = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=o.annotation,
                             default=typer.Option(None, *o.spec.declarations, help=f"{o.backend}: {o.spec.help}", **o.spec.settings))
           for name, o in _BACKEND_OPTIONS.items()]
    return [*shared, *own]


def pop_training_overrides(kwargs: dict[str, Any]) -> TrainingOverrides:
    """Take the training options out of a command's keyword arguments."""
    return TrainingOverrides({name: kwargs.pop(name, None) for name in (*_OPTIONS, *_BACKEND_OPTIONS)})


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
