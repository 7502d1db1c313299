"""The ``tracerl`` command: one group per part, each defined next to its code."""

from __future__ import annotations

import sys

import typer

from tracerl import __version__
from tracerl.collector.cli import app as collector_app
from tracerl.instrumentation.cli import register as register_instrumentation
from tracerl.pipeline.cli import app as pipeline_app
from tracerl.pipeline.cli import register_report, register_sql
from tracerl.orchestration.demo.recipe import DEMO
from tracerl.orchestration.loop.cli import loop_command
from tracerl.orchestration.rounds.cli import register as register_rounds
from tracerl.trainer.serving.cli import register as register_serve
from tracerl.trainer.training.cli import register as register_train

app = typer.Typer(
    name="tracerl",
    help="Train any LLM agent with reinforcement learning from its OpenTelemetry traces.",
    no_args_is_help=True,
    add_completion=False,
)
app.add_typer(pipeline_app, name="pipeline", help="Spans -> episodes -> training transitions.")
app.add_typer(collector_app, name="collector", help="OTLP receiver writing durable Parquet.")
register_instrumentation(app)  # run, gateway
register_serve(app)  # serve
train_app = register_train(app)  # train
register_rounds(app, train_app)  # train run, train loop, policy
app.command("demo")(loop_command(DEMO))  # the local loop on the built-in calculator agent
register_sql(app)  # sql
register_report(app)  # report


@app.command()
def version() -> None:
    """Print the tracerl version."""
    typer.echo(__version__)


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
