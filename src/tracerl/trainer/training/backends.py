"""The training backends, one table row each, and the one way to get a trainer from a row.

A row names the backend's trainer class by import path (``module:Class``, the form of an entry
point, imported only when a trainer is made: torch and DeepSpeed stay out of ``tracerl --help``)
and its options dataclass. The command-line options, a round's TOML section ``[NAME]`` and the
checkpoint manifest are built from the options dataclass alone, and the drivers (``tracerl
train``, scheduled rounds, the local loop) hand its instance to :func:`load_trainer` without
reading it; so a backend is added by its module, its options dataclass and a row here. A name no
row has is refused, naming those that exist.

Its own module, beside :mod:`~tracerl.trainer.training.backend` (the round of steps every
backend inherits), because each backend imports that base: a table there would import the
backends back.
"""

from __future__ import annotations

import os
import pkgutil
from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Any

from tracerl.trainer.training.config import OpenRLHFOptions, TorchOptions, TrainConfig

if TYPE_CHECKING:
    from tracerl.trainer.training.backend import PolicyGradientTrainer


class UnknownBackend(ValueError):
    """A backend name no row of :data:`BACKENDS` has; the message names those that exist."""


@dataclass(frozen=True)
class Backend:
    name: str
    # "module:Class" of a PolicyGradientTrainer taking (model_path, config: TrainConfig, options: the options type)
    trainer: str
    options: type  # a dataclass: its fields with an `option(...)` are this backend's command-line options
    help: str  # what sets it apart, for --backend's help

    def options_record(self, options: Any = None) -> dict[str, Any]:
        """The options a trainer ran with (None: the defaults) as its checkpoint manifest's ``config`` holds them: under
        the backend's name, nothing for a backend without options of its own."""
        if not fields(self.options):
            return {}
        return {self.name: asdict(options if options is not None else self.options())}


# --backend's choices; the first is the default
BACKENDS: dict[str, Backend] = {row.name: row for row in (
    Backend("torch", "tracerl.trainer.training.torch_backend:PolicyTrainer", TorchOptions, "one process, plain torch (CPU or one GPU)"),
    Backend("openrlhf", "tracerl.trainer.training.openrlhf_backend:OpenRLHFTrainer", OpenRLHFOptions,
            "OpenRLHF on DeepSpeed (ZeRO, one or many GPUs)"),
)}
DEFAULT_BACKEND = next(iter(BACKENDS))


def backend_named(name: str) -> Backend:
    """The row of backend ``name``; raises :class:`UnknownBackend` naming the backends for any other name."""
    if name not in BACKENDS:
        raise UnknownBackend(f"unknown backend {name!r}: use {' or '.join(BACKENDS)}")
    return BACKENDS[name]


def load_trainer(backend: str, model_path: str | os.PathLike, config: TrainConfig | None = None, options: Any = None) -> PolicyGradientTrainer:
    """The trainer of ``backend`` on ``model_path``, with that backend's ``options`` (None: its defaults): every caller gets one here.

    Raises :class:`UnknownBackend` for a name no row has, ``TypeError`` for options of another backend.
    """
    row = backend_named(backend)
    if options is not None and not isinstance(options, row.options):
        raise TypeError(f"backend {backend!r} takes {row.options.__name__}, got {type(options).__name__}")
    trainer_class = pkgutil.resolve_name(row.trainer)
    return trainer_class(model_path, config or TrainConfig(), options if options is not None else row.options())
