"""The ``tracerl`` command: one group per part, each defined next to its code.

A part whose extra is not installed (``pip install tracerl`` is capture only) keeps its
commands in ``--help``; calling one says which extra to install instead of failing on an
import. Parts are imported only when their extra is there, and a command imports its own
part alone: ``tracerl collector serve`` does not import the pipeline's or the trainer's
libraries (duckdb, torch...: ~50 MiB resident in every collector worker, and a slower
start for every command).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from dataclasses import dataclass

import typer

from tracerl import __version__
from tracerl.core.commands import command_group
from tracerl.core.extras import missing_message, missing_modules


@dataclass(frozen=True)
class Part:
    commands: tuple[str, ...]  # what ``register`` adds to the root app
    extra: str | None  # the install extra it needs (None: the core)
    register: Callable[[typer.Typer], None]
    # commands of the part that need a larger extra than the part itself (named when the part is missing)
    command_extras: tuple[tuple[str, str], ...] = ()


def _module(name: str):
    return importlib.import_module(f"tracerl.{name}")


def _register_training(app: typer.Typer) -> None:
    """``tracerl train`` needs torch alone (a GPU node trains on a dataset folder built elsewhere);
    the rounds around it (``train run``, ``train loop``, ``policy``) need the whole ``train`` extra."""
    train_group = _module("trainer.training.cli").register(app)  # train
    missing = missing_modules("train")
    if not missing:
        _module("orchestration.rounds.cli").register(app, train_group)  # train run, train loop, policy
        return
    for group, name, command in ((train_group, "run", "train run"), (train_group, "loop", "train loop"), (app, "policy", "policy")):
        _unavailable(group, name, missing_message("train", f"`tracerl {command}`", missing))


def _register_demo(app: typer.Typer) -> None:
    recipe = _module("orchestration.demo.recipe").DEMO
    app.command("demo")(_module("orchestration.local.cli").local_command(recipe))  # the local loop on the built-in calculator agent


PARTS = (
    Part(("run", "gateway"), None, lambda app: _module("instrumentation.cli").register(app)),
    Part(("collector",), "collector", lambda app: _module("collector.cli").register(app)),
    Part(("pipeline", "sql", "report"), "pipeline", lambda app: _module("pipeline.cli").register(app)),
    Part(("serve",), "train", lambda app: _module("trainer.serving.cli").register(app)),
    Part(("train", "policy"), "torch", _register_training, command_extras=(("policy", "train"),)),
    Part(("demo",), "train", _register_demo),
    Part(("model",), "torch", lambda app: _module("trainer.model_cli").register(app)),
)

UNAVAILABLE = {"allow_extra_args": True, "ignore_unknown_options": True}


def _unavailable(app: typer.Typer, name: str, message: str) -> None:
    """``tracerl NAME ...`` that says what to install (any arguments accepted, none read)."""

    def unavailable(ctx: typer.Context) -> None:
        typer.echo(f"tracerl: {message}", err=True)
        raise typer.Exit(2)

    help_text = message.split(" needs ", 1)[1].split(" (", 1)[0]
    app.command(name, context_settings=UNAVAILABLE, add_help_option=False, help=f"(not installed: needs {help_text})")(unavailable)


def build_app(command: str | None = None) -> typer.Typer:
    """The ``tracerl`` app; with ``command`` (the one about to run), only the part that has it,
    unless no part has it (``version``, a typo): then every part, so that errors list them all."""
    app = command_group(
        name="tracerl",
        help="Train any LLM agent with reinforcement learning from its OpenTelemetry traces.",
        no_args_is_help=True,
    )
    for part in [p for p in PARTS if command in p.commands] or PARTS:
        missing = missing_modules(part.extra) if part.extra else []
        if not missing:
            try:
                part.register(app)
                continue
            except ModuleNotFoundError as exc:  # an environment holding part of an extra
                if not part.extra or (exc.name or "tracerl").startswith("tracerl"):
                    raise
                missing = [exc.name]
        for name in part.commands:
            extra = dict(part.command_extras).get(name, part.extra)
            _unavailable(app, name, missing_message(extra, f"`tracerl {name}`", missing if extra == part.extra else None))

    @app.command()
    def version() -> None:
        """Print the tracerl version."""
        typer.echo(__version__)

    return app


def __getattr__(name: str) -> typer.Typer:
    """``tracerl.cli.app``, every part registered (tests drive it with typer's CliRunner); made on first use."""
    if name == "app":
        globals()["app"] = built = build_app()
        return built
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def launcher_argument(argv: list[str]) -> list[str]:
    """``argv`` without the ``--local_rank=N`` the deepspeed launcher puts first (before the command).

    ``deepspeed --module tracerl train ...`` runs ``python -m tracerl --local_rank=N train ...`` in
    each process; the launcher sets ``LOCAL_RANK`` in the environment too, which is what
    :func:`tracerl.trainer.training.device.launch_environment` reads.
    """
    if argv and argv[0].startswith("--local_rank="):
        return argv[1:]
    if len(argv) > 1 and argv[0] == "--local_rank":
        return argv[2:]
    return argv


def main() -> None:
    argv = launcher_argument(sys.argv[1:])
    build_app(argv[0] if argv and not argv[0].startswith("-") else None)(args=argv)


def pipeline_main() -> None:
    """The ``pipeline`` console script: ``pipeline ...`` equals ``tracerl pipeline ...``."""
    message = missing_message("pipeline", "`pipeline`")
    if message:
        sys.exit(f"pipeline: {message}")
    _module("pipeline.cli").app()
