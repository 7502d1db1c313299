"""The ``tracerl`` command: one group per part, each defined next to its code."""

from __future__ import annotations

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


def main() -> None:
    app()
