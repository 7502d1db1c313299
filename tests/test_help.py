"""Every command's ``--help`` reads at 80 columns: each option's full names are there, never cut.

The commands are walked from the ``tracerl`` app itself, so a command added tomorrow is checked too,
and from each example's ``python -m examples.X.train`` program.
"""

from __future__ import annotations

from collections.abc import Iterator

import typer
from typer import _click as click  # typer 0.29 carries its own click: its commands are that click's

from examples.calc.recipe import RECIPE as CALC
from examples.rag.recipe import RECIPE as RAG
from examples.sql.recipe import RECIPE as SQL
from tracerl.cli import build_app
from tracerl.orchestration.local.cli import recipe_app


def commands(command: click.Command, path: tuple[str, ...] = ("tracerl",)) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    yield path, command
    if hasattr(command, "list_commands"):  # a group
        context = click.Context(command, info_name=" ".join(path))
        for name in command.list_commands(context):
            yield from commands(command.get_command(context, name), (*path, name))


def every_command() -> Iterator[tuple[tuple[str, ...], click.Command]]:
    yield from commands(typer.main.get_command(build_app()))
    for recipe in (CALC, RAG, SQL):
        yield from commands(typer.main.get_command(recipe_app(recipe)), (f"python -m examples.{recipe.name}.train",))


def help_at(width: int, path: tuple[str, ...], command: click.Command) -> str:
    context = click.Context(command, info_name=" ".join(path), terminal_width=width, max_content_width=width)
    return command.get_help(context)


def test_every_option_name_is_whole_in_every_help_at_80_columns():
    cut = {}
    walked = list(every_command())
    for path, command in walked:
        text = help_at(80, path, command)
        missing = [name for param in command.params if param.param_type_name == "option" and not param.hidden
                   for name in [*param.opts, *param.secondary_opts] if name not in text]
        if missing or "…" in text:
            cut[" ".join(path)] = missing or ["…"]
    assert len(walked) > 20  # every part's commands were there to check
    assert cut == {}


def test_no_help_line_is_wider_than_80_columns_except_an_option_name():
    """Click wraps help text to the width; only an option's own names may run past it."""
    wide = {}
    for path, command in every_command():
        lines = [line for line in help_at(80, path, command).splitlines() if len(line) > 80 and not line.lstrip().startswith("-")]
        if lines:
            wide[" ".join(path)] = lines
    assert wide == {}


def test_a_repeatable_option_shows_the_type_of_one_value():
    """``--split <str>`` (given once per value), not the parameter's Python type ``<list[str]>``."""
    shown = {" ".join(path): line.strip() for path, command in every_command()
             for line in help_at(80, path, command).splitlines() if "<list[" in line or "<tuple[" in line}
    assert shown == {}


def test_threads_is_torch_s_threads_wherever_it_is_a_flag():
    """One flag, one meaning: a build's DuckDB threads are --duckdb-threads (its former --threads is hidden)."""
    meanings = {" ".join(path): param.help for path, command in every_command() for param in command.params
                if param.param_type_name == "option" and not param.hidden and "--threads" in param.opts}
    assert {"tracerl train", "tracerl train run", "tracerl serve", "tracerl demo"} <= set(meanings)
    assert all("torch threads" in text.lower() for text in meanings.values()), meanings
