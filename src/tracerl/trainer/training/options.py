"""The training options every command takes, declared once, by fields.

``tracerl train``, ``tracerl train run`` / ``train loop``, ``tracerl demo`` and each
``python -m examples.X.train`` take them (:func:`with_training_options`, or :func:`training_parameters` in a
signature built from a config): the same ``--backend``, ``--lr``, ``--micro-batch-size``, ``--lora-rank``,
... with the same help, and the command receives a :class:`TrainingOverrides` holding what the user gave.
Each command applies it over its own defaults (``TrainConfig()``, a round's TOML ``[train]`` and backend
sections, a recipe's ``LocalConfig``), so an option means the same thing everywhere and nothing given
changes nothing. The flags are made by :func:`~tracerl.core.dataclass_options.option_parameters` from
the fields that declare one: :class:`TrainConfig`'s, shared by every backend, and each backend's own, of
its row's options dataclass (:data:`~tracerl.trainer.training.backends.BACKENDS`), so a new field or a
new backend brings its flags with it. ``--backend`` alone is declared here: it chooses a row, and is a
field of no training config.

The configs that nest a ``TrainConfig`` (``RoundConfig.train``, ``LocalConfig.train``) take none of its
options themselves (``nested_options()``): their commands take them from here, once.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, Optional

import typer

from tracerl.core.dataclass_options import OPTION, given_options, option_parameters
from tracerl.trainer.training.backends import BACKENDS, DEFAULT_BACKEND, Backend, UnknownBackend, backend_named
from tracerl.trainer.training.config import TrainConfig

_BACKEND_HELP = "; ".join(f"{name}{' (default)' if name == DEFAULT_BACKEND else ''}: {row.help}" for name, row in BACKENDS.items())
_BACKEND = inspect.Parameter("backend", inspect.Parameter.KEYWORD_ONLY, annotation=Optional[str],
                             default=typer.Option(None, "--backend", help=f"{_BACKEND_HELP}."))


def _prefix(row: Backend) -> str:
    """The start of the parameter names of a backend's own options: two backends' fields never share a parameter."""
    return f"{row.name}_"


def training_parameters(defaults: TrainConfig | None = None) -> list[inspect.Parameter]:
    """The training options as keyword parameters, for a command's ``__signature__``: ``--backend``, one per
    :class:`TrainConfig` field that declares one, then each backend's own (their help begins with its name).

    Every option defaults to None, "not given"; its help names ``defaults``' value (a recipe's own; None:
    ``TrainConfig``'s), what the command trains with when the option is not given.
    """
    shared = option_parameters(defaults if defaults is not None else TrainConfig, overrides=True)
    own = [p for row in BACKENDS.values() for p in option_parameters(row.options, _prefix(row), overrides=True, help_prefix=f"{row.name}: ")]
    return [_BACKEND, *shared, *own]


_PARAMETERS = tuple(p.name for p in training_parameters())


@dataclass(frozen=True)
class TrainingOverrides:
    """What the user gave on the command line (None: not given), keyed by :func:`training_parameters`' names."""

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
        misplaced = {other.name: _flags(other.options, given) for other in BACKENDS.values() if other is not row
                     if (given := given_options(other.options, self.values, _prefix(other)))}
        if misplaced:
            said = "; ".join(f"{', '.join(flags)} {'is an option' if len(flags) == 1 else 'are options'} of --backend {owner}"
                             for owner, flags in misplaced.items())
            raise typer.BadParameter(f"{said}, not of {backend}", param_hint="--backend")
        config = replace(config, **given_options(TrainConfig, self.values))
        own = given_options(row.options, self.values, _prefix(row))
        try:
            options = replace(backend_options.get(backend) or row.options(), **own)
        except ValueError as exc:  # the options' own check (e.g. a KL penalty without its reference model)
            raise typer.BadParameter(str(exc), param_hint=", ".join(_flags(row.options, own)) or "--backend") from None
        return backend, config, {**backend_options, backend: options}


def _flags(options_type: type, given: Mapping[str, Any]) -> list[str]:
    """The flags of the options ``given`` (by field name) of ``options_type``, as messages name them."""
    return [f.metadata[OPTION].flag for f in fields(options_type) if f.name in given]


def pop_training_overrides(kwargs: dict[str, Any]) -> TrainingOverrides:
    """Take the training options out of a command's keyword arguments."""
    return TrainingOverrides({name: kwargs.pop(name, None) for name in _PARAMETERS})


def with_training_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Give ``command`` (which takes ``training: TrainingOverrides``) every training option."""
    signature = inspect.signature(command)
    own = [p for p in signature.parameters.values() if p.name != "training"]

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return command(*args, training=pop_training_overrides(kwargs), **kwargs)

    wrapper.__signature__ = signature.replace(parameters=[*own, *training_parameters()])  # type: ignore[attr-defined]
    return wrapper
