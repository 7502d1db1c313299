"""The ``tracerl`` command: one group per part, each defined next to its code.

A part whose extra is not installed (``pip install tracerl`` is capture only) keeps its
commands in ``--help``; calling one says which extra to install instead of failing on an
import. Parts are imported only when their extra is there.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from dataclasses import dataclass

import typer

from tracerl import __version__
from tracerl.extras import missing_message, missing_modules


@dataclass(frozen=True)
class Part:
    commands: tuple[str, ...]  # what ``register`` adds to the root app
    extra: str | None  # the install extra it needs (None: the core)
    register: Callable[[typer.Typer], None]


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
    for name in ("run", "loop"):
        _unavailable(train_group, name, missing_message("train", f"`tracerl train {name}`", missing))


def _register_demo(app: typer.Typer) -> None:
    recipe = _module("orchestration.demo.recipe").DEMO
    app.command("demo")(_module("orchestration.loop.cli").loop_command(recipe))  # the local loop on the built-in calculator agent


PARTS = (
    Part(("run", "gateway"), None, lambda app: _module("instrumentation.cli").register(app)),
    Part(("collector",), "collector", lambda app: _module("collector.cli").register(app)),
    Part(("pipeline", "sql", "report"), "pipeline", lambda app: _module("pipeline.cli").register(app)),
    Part(("serve",), "train", lambda app: _module("trainer.serving.cli").register(app)),
    Part(("train",), "torch", _register_training),
    Part(("policy",), "train", lambda app: None),  # registered with the rounds by the part above
    Part(("demo",), "train", _register_demo),
)

UNAVAILABLE = {"allow_extra_args": True, "ignore_unknown_options": True}


def _unavailable(app: typer.Typer, name: str, message: str) -> None:
    """``tracerl NAME ...`` that says what to install (any arguments accepted, none read)."""

    def unavailable(ctx: typer.Context) -> None:
        typer.echo(f"tracerl: {message}", err=True)
        raise typer.Exit(2)

    help_text = message.split(" needs ", 1)[1].split(" (", 1)[0]
    app.command(name, context_settings=UNAVAILABLE, add_help_option=False, help=f"(not installed: needs {help_text})")(unavailable)


def build_app() -> typer.Typer:
    app = typer.Typer(
        name="tracerl",
        help="Train any LLM agent with reinforcement learning from its OpenTelemetry traces.",
        no_args_is_help=True,
        add_completion=False,
    )
    for part in PARTS:
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
            _unavailable(app, name, missing_message(part.extra, f"`tracerl {name}`", missing))

    @app.command()
    def version() -> None:
        """Print the tracerl version."""
        typer.echo(__version__)

    return app


app = build_app()


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
    app(args=launcher_argument(sys.argv[1:]))


def pipeline_main() -> None:
    """The ``pipeline`` console script: ``pipeline ...`` equals ``tracerl pipeline ...``."""
    message = missing_message("pipeline", "`pipeline`")
    if message:
        sys.exit(f"pipeline: {message}")
    _module("pipeline.cli").app()
