"""A config dataclass is its own command line and its own config file: each field declares its option once.

The fields of a config (``BuildOptions``, ``JudgeOptions``, ``LocalConfig``, ``RoundConfig``,
``TrainConfig``, ``VllmOptions``, the training backends' options) say their flag, help and bounds
in their metadata with :func:`option`, and a config file's keys are the field names. So a new
field is one line, and its flag, its key and its help cannot drift apart (as TRL's ``TrlParser``
makes flags and a config file of dataclasses).

- :func:`option_parameters` turns a config into typer parameters: from an *instance*, whose values
  are the defaults (a recipe's own show in its ``--help``), or from a *class*, where a field
  without a default is a required option. :func:`config_from_options` puts what the command
  received back into a copy of the instance (or a new config of the class).
- A command whose config also comes from a file takes its options as *overrides*
  (``overrides=True``): each defaults to None, "not given", and its help names the field's
  default. :func:`given_options` lays out what the user gave as the file's table,
  :func:`merged` puts it on top of the file's, and :func:`config_from_table` makes the config:
  the field's default, then the file, then the command line. A file's value is checked against
  its field's type and its option's ``min``/``max``, so a bound too is declared once.
- A nested config field (``vllm: VllmOptions``) contributes its own options, their parameter
  names prefixed by the field's (``vllm_dtype``); :func:`nested_options` on the field chooses
  which. :func:`option_of` gives a field the option of another config's field, for one option
  two configs share (``--split`` of a build and of the judge).
- A flag renamed keeps working: ``option("--duckdb-threads", renamed_from=("--threads",))`` still
  reads ``--threads``, hidden from ``--help``, and warns on stderr naming the new flag.

Kept free of typer at import: configs below the CLI (the pipeline's, the trainer's, the serving
side's) declare their options without pulling the command-line library into every process.
"""

from __future__ import annotations

import dataclasses
import inspect
import types
import typing
from collections.abc import Callable, Collection, Mapping
from dataclasses import MISSING, dataclass, field, fields, is_dataclass, replace
from pathlib import Path
from typing import Any, Optional, Union

OPTION = "tracerl.option"  # the metadata key of a field's option
NESTED = "tracerl.nested_options"  # the metadata key naming which options of a nested config a command takes
FILE_KEY = "tracerl.file_key"  # the metadata key of a field's config-file key, where it is not the field's name


@dataclass(frozen=True)
class Option:
    """One field's command-line option: its flag(s), help, and how its value crosses the command line."""

    declarations: tuple[str, ...]
    help: str | None = None
    settings: dict[str, Any] = field(default_factory=dict)  # typer.Option's other arguments (min, max, exists, envvar, metavar)
    cli_type: Any = None  # the parameter's type when it is not the field's (a dict given as repeated NAME=VALUE strings)
    to_cli: Callable[[Any], Any] | None = None  # the field's value as the option's default
    from_cli: Callable[[Any], Any] | None = None  # the option's value as the field's (a ValueError names what is wrong)
    renamed_from: tuple[str, ...] = ()  # the flags it had before: still read (hidden), with a warning naming the new one

    @property
    def flag(self) -> str:
        """The option's name in messages: its first long name (``--trajectory`` of ``--trajectory/--transitions``)."""
        names = [name for declaration in self.declarations for name in declaration.split("/")]
        return next((name for name in names if name.startswith("--")), names[0])


class ConfigError(ValueError):
    """A config file's table does not make a config; the message names the file, the table and the key."""


def option(*declarations: str, help: str | None = None, cli_type: Any = None, to_cli: Callable[[Any], Any] | None = None,
           from_cli: Callable[[Any], Any] | None = None, renamed_from: tuple[str, ...] = (), **settings: Any) -> dict[str, Option]:
    """A field's metadata declaring its option: ``field(default=8, metadata=option("--rounds", min=0, help=...))``.

    A ``tuple[X, ...]`` field is a repeatable option (``--split a --split b``) unless ``cli_type`` says otherwise.
    ``renamed_from``: the option's former flags, so that users' commands keep working after a rename.
    """
    return {OPTION: Option(declarations, help, settings, cli_type, to_cli, from_cli, renamed_from)}


def option_of(config_type: type, name: str) -> dict[str, Option]:
    """The metadata of ``config_type``'s field ``name``: the same option on another config, declared once."""
    return {OPTION: next(f for f in fields(config_type) if f.name == name).metadata[OPTION]}


def nested_options(*names: str) -> dict[str, tuple[str, ...]]:
    """A nested config field's metadata: a command takes only the options of these of its fields (none: no option)."""
    return {NESTED: names}


def file_key(key: str) -> dict[str, str]:
    """A field's metadata: its key in a config file is ``key`` (``[[endpoint]]`` for ``endpoints``)."""
    return {FILE_KEY: key}


def not_a_file_key() -> dict[str, None]:
    """A field's metadata: no key of a config file sets it (its loader fills it from tables of its own)."""
    return {FILE_KEY: None}


def one_of(choices: tuple[str, ...]) -> Callable[[str], str]:
    """An option's ``from_cli`` check that its value is one of ``choices``."""

    def check(value: str) -> str:
        if value not in choices:
            raise ValueError(f"{value!r} is not one of {', '.join(choices)}")
        return value

    return check


def option_parameters(config: Any, prefix: str = "", *, only: Collection[str] | None = None,
                      overrides: bool = False, help_prefix: str = "") -> list[inspect.Parameter]:
    """Keyword parameters, one ``typer.Option`` per declared field of ``config`` (an instance or a class).

    ``only``: these fields alone (a nested config's are chosen by its field's :func:`nested_options`);
    ``overrides``: every option defaults to None, "not given" (see :func:`given_options`);
    ``help_prefix``: begins each option's help, where one command takes the options of several configs
    (``openrlhf: `` before each of that backend's own).
    """
    import typer

    parameters = []
    for d in _declared(_type(config), only):
        f, value = d.field, _default(config, d.field)
        if d.nested:
            parameters += option_parameters(value, f"{prefix}{f.name}_", only=d.only, overrides=overrides, help_prefix=help_prefix)
            continue
        spec: Option = f.metadata[OPTION]
        cli_type, to_cli, _ = _crossing(spec, d.annotation)
        settings = dict(spec.settings)
        if typing.get_origin(cli_type) is list:  # a repeatable option: one value's type, where typer shows <list[str]>
            settings.setdefault("metavar", f"<{getattr(typing.get_args(cli_type)[0], '__name__', 'value')}>".lower())
        help_text = help_prefix + spec.help if spec.help else None
        if overrides:  # None: not given; the help names the field's default, which the typer default cannot
            default, cli_type = None, Optional[cli_type]
            shown = None if value is MISSING else _shown(spec, to_cli(value))
            help_text = f"{help_text}  [default: {shown}]" if shown and help_text else help_text
        else:
            default = ... if value is MISSING else to_cli(value)  # a field without a default is a required option
        typer_option = typer.Option(default, *spec.declarations, help=help_text, **settings)
        parameters.append(inspect.Parameter(prefix + f.name, inspect.Parameter.KEYWORD_ONLY, default=typer_option, annotation=cli_type))
        if spec.renamed_from:
            parameters.append(_former_flags(spec, prefix + f.name, cli_type))
    return parameters


_FORMER = "__former_flag"  # the suffix of the parameter that reads an option's former flags


def _former_flags(spec: Option, name: str, cli_type: Any) -> inspect.Parameter:
    """A hidden parameter reading ``spec``'s former flags, warning when one is given: :func:`_received` takes its value."""
    import typer

    def warn(value: Any) -> Any:
        if value not in (None, [], ()):
            typer.echo(f"warning: {'/'.join(spec.renamed_from)} is deprecated here: use {spec.flag}", err=True)
        return value

    bounds = {key: spec.settings[key] for key in ("min", "max") if key in spec.settings}
    typer_option = typer.Option(None, *spec.renamed_from, hidden=True, callback=warn, **bounds)
    return inspect.Parameter(name + _FORMER, inspect.Parameter.KEYWORD_ONLY, default=typer_option, annotation=Optional[cli_type])


def _received(values: Mapping[str, Any], name: str, absent: Any = None) -> Any:
    """What a command received for option ``name``: by a former flag where one was given, else by its own (``absent``: none)."""
    former = values.get(name + _FORMER)
    return former if former not in (None, [], ()) else values.get(name, absent)


def with_options(config: Any, *, only: Collection[str] | None = None, overrides: bool = False) -> Callable[[Callable], Callable]:
    """A command's decorator: it takes its own parameters, then :func:`option_parameters` of ``config`` (into ``**options``)."""

    def decorate(command: Callable) -> Callable:
        hints = typing.get_type_hints(command, include_extras=True)  # its annotations are strings (from __future__)
        own = [p.replace(annotation=hints.get(p.name, p.annotation)) for p in inspect.signature(command).parameters.values()
               if p.kind != p.VAR_KEYWORD]
        command.__signature__ = inspect.Signature([*own, *option_parameters(config, only=only, overrides=overrides)])  # type: ignore[attr-defined]
        return command

    return decorate


def config_from_options(config: Any, values: dict[str, Any], prefix: str = "") -> Any:
    """``config`` (an instance: a copy of it; a class: a new one) with the options' ``values`` put in, keyed as
    :func:`option_parameters` named them. A value its option refuses raises ``typer.BadParameter`` naming the option."""
    changes = {}
    for d in _declared(_type(config), None):
        f = d.field
        if d.nested:
            changes[f.name] = config_from_options(_default(config, f), values, f"{prefix}{f.name}_")
        elif (value := _received(values, prefix + f.name, MISSING)) is not MISSING:
            changes[f.name] = _from_cli(f.metadata[OPTION], d.annotation, value)
    return replace(config, **changes) if not isinstance(config, type) else config(**changes)


def given_options(config_type: type, values: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """What the user gave of :func:`option_parameters`' ``overrides``, as a config file's table (nested configs as
    tables of their own): what a file's table takes on top with :func:`config_from_table`. None and an empty
    repeatable option are "not given"."""
    table: dict[str, Any] = {}
    for d in _declared(config_type, None):
        f, key = d.field, d.field.metadata.get(FILE_KEY, d.field.name)
        if d.nested:
            if inner := given_options(d.annotation, values, f"{prefix}{f.name}_"):
                table[key] = inner
        elif (value := _received(values, prefix + f.name)) not in (None, [], ()):
            table[key] = _from_cli(f.metadata[OPTION], d.annotation, value)
    return table


def merged(config_type: type, table: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """A file's table for ``config_type`` with ``over`` on top: a nested config's table is merged key by key (a file's
    ``[build]`` and ``--split``), any other value replaced whole (``--policy`` replaces the file's policies)."""
    keys, hints = _keys(config_type), typing.get_type_hints(config_type)
    result = dict(table)
    for key, value in over.items():
        inner = hints[keys[key].name] if key in keys else None
        nested = isinstance(inner, type) and is_dataclass(inner) and isinstance(value, Mapping) and isinstance(result.get(key), Mapping)
        result[key] = merged(inner, result[key], value) if nested else value
    return result


def config_from_table(config_type: type, table: Any, where: str) -> Any:
    """A ``config_type`` from a config file's table (a TOML file's, read by ``tomllib``): its keys are the field names
    (or their :func:`file_key`), a nested config is a table of its own, a tuple of configs an array of tables.
    Each value is checked against its field's type; raises :class:`ConfigError` naming ``where``, the table and the key."""
    if isinstance(table, config_type):
        return table
    if not isinstance(table, Mapping):
        raise ConfigError(f"{where}: expected a table of {', '.join(_keys(config_type))}, got {table!r}")
    keys = _keys(config_type)
    unknown = set(table) - set(keys)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}; known: {', '.join(sorted(keys))}")
    missing = [key for key, f in keys.items() if key not in table and f.default is MISSING and f.default_factory is MISSING]
    if missing:
        flags = [f"{key} (or {keys[key].metadata[OPTION].flag})" if OPTION in keys[key].metadata else key for key in missing]
        raise ConfigError(f"{where}: missing {', '.join(flags)}")
    hints = typing.get_type_hints(config_type)
    values = {}
    for key, value in table.items():
        f = keys[key]
        values[f.name] = _checked(hints[f.name], value, where, key)
        if OPTION in f.metadata:
            _check_bounds(f.metadata[OPTION], values[f.name], where, key)
    try:
        return config_type(**values)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: {exc}") from None


def _type(config: Any) -> type:
    return config if isinstance(config, type) else type(config)


def _default(config: Any, f: dataclasses.Field) -> Any:
    """The field's value in ``config`` (an instance), else its default (MISSING: none)."""
    if not isinstance(config, type):
        return getattr(config, f.name)
    return f.default_factory() if f.default_factory is not MISSING else f.default


@dataclass(frozen=True)
class _Declared:
    """A field with an option, or a nested config whose options (``only``: these of its fields; None: all) are a command's."""

    field: dataclasses.Field
    annotation: Any
    nested: bool
    only: tuple[str, ...] | None = None


def _declared(config_type: type, only: Collection[str] | None) -> list[_Declared]:
    """The fields of ``config_type`` that are options, or nested configs with options, each with its resolved type."""
    hints = typing.get_type_hints(config_type)
    declared = []
    for f in fields(config_type):
        if only is not None and f.name not in only:
            continue
        if OPTION in f.metadata:
            declared.append(_Declared(f, hints[f.name], nested=False))
        elif _is_config(hints[f.name]) and f.metadata.get(NESTED) != ():
            declared.append(_Declared(f, hints[f.name], nested=True, only=f.metadata.get(NESTED)))
    return declared


def _is_config(annotation: Any) -> bool:
    return isinstance(annotation, type) and is_dataclass(annotation) and any(OPTION in f.metadata for f in fields(annotation))


def _keys(config_type: type) -> dict[str, dataclasses.Field]:
    return {f.metadata.get(FILE_KEY, f.name): f for f in fields(config_type) if f.init and f.metadata.get(FILE_KEY, f.name) is not None}


def _repeated(annotation: Any) -> Any:
    """``X`` of a ``tuple[X, ...]`` annotation (a repeatable option), else None."""
    args = typing.get_args(annotation)
    return args[0] if typing.get_origin(annotation) is tuple and len(args) == 2 and args[1] is Ellipsis else None


def _crossing(spec: Option, annotation: Any) -> tuple[Any, Callable[[Any], Any], Callable[[Any], Any]]:
    """The option's parameter type and the field's value to and from it."""
    if spec.cli_type is None and (item := _repeated(annotation)) is not None:
        return list[item], spec.to_cli or list, spec.from_cli or tuple
    same = lambda value: value  # noqa: E731
    return spec.cli_type or _plain(annotation), spec.to_cli or same, spec.from_cli or same


def _from_cli(spec: Option, annotation: Any, value: Any) -> Any:
    try:
        return _crossing(spec, annotation)[2](value)
    except ValueError as exc:
        import typer

        raise typer.BadParameter(str(exc), param_hint=spec.flag) from None


def _shown(spec: Option, value: Any) -> str | None:
    """A default as ``--help`` shows it: a switch by its flag's name (``no-air``), a list joined; nothing for none."""
    if isinstance(value, bool):
        on, _, off = spec.declarations[0].partition("/")
        return (on if value else off).lstrip("-") or None
    if isinstance(value, (list, tuple)):
        return ", ".join(map(str, value)) or None
    return None if value in (None, "") else str(value)


def _plain(annotation: Any) -> Any:
    """``X | None`` as ``Optional[X]``, which every typer version reads."""
    args = typing.get_args(annotation)
    if type(None) in args and len(args) == 2:
        return Optional[next(a for a in args if a is not type(None))]
    return annotation


def _check_bounds(spec: Option, value: Any, where: str, key: str) -> None:
    """The option's ``min`` and ``max`` hold in a file too: a bound is declared once, for the flag and the key."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return
    low, high = spec.settings.get("min"), spec.settings.get("max")
    if low is not None and value < low:
        raise ConfigError(f"{where}: {key} must be at least {low}, got {value}")
    if high is not None and value > high:
        raise ConfigError(f"{where}: {key} must be at most {high}, got {value}")


_SCALARS = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}


def _checked(annotation: Any, value: Any, where: str, key: str) -> Any:
    """``value`` of a file's ``key`` as a field of type ``annotation`` takes it: a list as a tuple, a string as a
    ``Path``, a table as a nested config; a value of the wrong type raises :class:`ConfigError` naming the key."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (Union, types.UnionType) and type(None) in args and len(args) == 2:
        return None if value is None else _checked(next(a for a in args if a is not type(None)), value, where, key)
    if isinstance(annotation, type) and is_dataclass(annotation):
        return config_from_table(annotation, value, f"{where} [{key}]")
    if (item := _repeated(annotation)) is not None:
        items = value if isinstance(value, (list, tuple)) else [value]  # one value stands for a list of one
        if isinstance(item, type) and is_dataclass(item):
            return tuple(config_from_table(item, v, f"{where} [[{key}]]") for v in items)
        return tuple(_checked(item, v, where, key) for v in items)
    if origin is tuple:
        return tuple(value) if isinstance(value, list) else value
    if origin is dict and len(args) == 2:
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where}: {key} must be a table, got {value!r}")
        return {k: _checked(args[1], v, where, f"{key}.{k}") for k, v in value.items()}
    if annotation is Path:
        if not isinstance(value, (str, Path)):
            raise ConfigError(f"{where}: {key} must be a path (a string), got {value!r}")
        return Path(value)
    if annotation in _SCALARS:
        fits = isinstance(value, annotation) and not (isinstance(value, bool) and annotation is not bool)
        if not fits and not (annotation is float and isinstance(value, int) and not isinstance(value, bool)):
            raise ConfigError(f"{where}: {key} must be {_SCALARS[annotation]}, got {value!r}")
    return value
