"""A config dataclass is its own command line: each field declares its option once, in its metadata.

The fields of a config (``LocalConfig``, ``VllmOptions``) say their flag, help and bounds with
:func:`option`; :func:`option_parameters` turns a config *instance* into typer parameters whose
defaults are that instance's values (a recipe's own defaults show in its ``--help``), and
:func:`config_from_options` puts what the command received back into a copy of it. Nothing is
declared twice, so a new field is one line and cannot drift from its option (as TRL's
``TrlParser`` does with ``dataclasses`` + ``argparse``). A nested config field (``vllm:
VllmOptions``) contributes its own fields, their parameter names prefixed by the field's.

Kept free of typer at import: configs below the CLI (the trainer's, the serving side's)
declare their options without pulling the command-line library into every process.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass, field, fields, is_dataclass, replace
from typing import Any, Optional

OPTION = "tracerl.option"  # the metadata key


@dataclass(frozen=True)
class Option:
    """One field's command-line option: its flag(s), help, and how its value crosses the command line."""

    declarations: tuple[str, ...]
    help: str | None = None
    settings: dict[str, Any] = field(default_factory=dict)  # typer.Option's other arguments (min, max, exists, click_type)
    cli_type: Any = None  # the parameter's type when it is not the field's (a dict given as repeated NAME=VALUE strings)
    to_cli: Callable[[Any], Any] | None = None  # the field's value as the option's default
    from_cli: Callable[[Any], Any] | None = None  # the option's value as the field's (may raise typer.BadParameter)


def option(*declarations: str, help: str | None = None, cli_type: Any = None, to_cli: Callable[[Any], Any] | None = None,
           from_cli: Callable[[Any], Any] | None = None, **settings: Any) -> dict[str, Option]:
    """A field's metadata declaring its option: ``field(default=8, metadata=option("--rounds", min=0, help=...))``."""
    return {OPTION: Option(declarations, help, settings, cli_type, to_cli, from_cli)}


def _declared(config_type: type) -> list[tuple[dataclasses.Field, Any]]:
    """The fields of ``config_type`` with an option or a nested config, each with its resolved type."""
    hints = typing.get_type_hints(config_type)
    return [(f, hints[f.name]) for f in fields(config_type) if OPTION in f.metadata or _is_config(hints[f.name])]


def _is_config(annotation: Any) -> bool:
    return isinstance(annotation, type) and is_dataclass(annotation) and any(OPTION in f.metadata for f in fields(annotation))


def _plain(annotation: Any) -> Any:
    """``X | None`` as ``Optional[X]``, which every typer version reads."""
    args = typing.get_args(annotation)
    if type(None) in args and len(args) == 2:
        return Optional[next(a for a in args if a is not type(None))]
    return annotation


def option_parameters(config: Any, prefix: str = "") -> list[inspect.Parameter]:
    """Keyword parameters, one ``typer.Option`` per declared field of ``config``, defaulting to its values."""
    import typer

    parameters = []
    for f, annotation in _declared(type(config)):
        value = getattr(config, f.name)
        if OPTION not in f.metadata:
            parameters += option_parameters(value, f"{prefix}{f.name}_")
            continue
        spec: Option = f.metadata[OPTION]
        default = spec.to_cli(value) if spec.to_cli else value
        typer_option = typer.Option(default, *spec.declarations, help=spec.help, **spec.settings)
        parameters.append(inspect.Parameter(prefix + f.name, inspect.Parameter.KEYWORD_ONLY, default=typer_option,
                                            annotation=spec.cli_type or _plain(annotation)))
    return parameters


def config_from_options(config: Any, values: dict[str, Any], prefix: str = "") -> Any:
    """A copy of ``config`` with the options' ``values`` (keyed as :func:`option_parameters` named them) put back."""
    changes = {}
    for f, _ in _declared(type(config)):
        if OPTION not in f.metadata:
            changes[f.name] = config_from_options(getattr(config, f.name), values, f"{prefix}{f.name}_")
        elif prefix + f.name in values:
            spec: Option = f.metadata[OPTION]
            value = values[prefix + f.name]
            changes[f.name] = spec.from_cli(value) if spec.from_cli else value
    return replace(config, **changes)

