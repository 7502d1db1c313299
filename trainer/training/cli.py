"""``tracerl train``: one training pass over a dataset folder, a new checkpoint, an optional publish."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from tracerl.trainer.publish import TARGET_KINDS, BuiltinServer
from tracerl.trainer.training.config import TrainConfig

console = Console(stderr=True)


def train(
    dataset: Path = typer.Option(..., "--dataset", help="Folder written by `tracerl pipeline build-dataset`."),
    model: Path = typer.Option(..., "--model", help="Hugging Face checkpoint of the current policy."),
    out: Path = typer.Option(..., "--out", help="Where to write the new checkpoint."),
    server: Optional[str] = typer.Option(None, "--server", help="Policy endpoint to refresh, e.g. http://127.0.0.1:8000/v1"),
    server_kind: str = typer.Option(
        BuiltinServer.kind, "--server-kind", help=f"What serves at --server: {', '.join(sorted(TARGET_KINDS))} ({BuiltinServer.kind}: `tracerl serve`)."
    ),
    version: Optional[int] = typer.Option(None, "--version", help="Policy version to announce (default: the server's next)."),
    learning_rate: float = typer.Option(TrainConfig.learning_rate, "--lr"),
    epochs: int = typer.Option(TrainConfig.epochs, "--epochs", min=1, help="Passes over the batch."),
    minibatch_size: int = typer.Option(TrainConfig.minibatch_size, "--minibatch-size", min=1),
    clip_epsilon: float = typer.Option(TrainConfig.clip_epsilon, "--clip", min=0.0, help="PPO clip range of the importance ratio."),
    seed: int = typer.Option(TrainConfig.seed, "--seed"),
) -> None:
    """One clipped policy-gradient pass of the torch backend over a dataset."""
    from tracerl.trainer.publish import PublishError, publish, target_for
    from tracerl.trainer.training.backend import TrainingBackend
    from tracerl.trainer.training.dataset import DatasetError, read_dataset
    from tracerl.trainer.training.torch_backend import PolicyTrainer

    if not (model / "config.json").exists():
        raise typer.BadParameter(f"{model} is not a Hugging Face checkpoint (no config.json)", param_hint="--model")
    try:
        target = target_for(server, server_kind) if server else None
    except PublishError as exc:
        raise typer.BadParameter(str(exc), param_hint="--server-kind") from exc
    try:
        samples, skipped = read_dataset(dataset)
    except DatasetError as exc:
        raise typer.BadParameter(str(exc), param_hint="--dataset") from exc
    config = TrainConfig(learning_rate=learning_rate, epochs=epochs, minibatch_size=minibatch_size, clip_epsilon=clip_epsilon, seed=seed)
    trainer: TrainingBackend = PolicyTrainer(model, config)
    with Progress(TextColumn("training"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console) as bar:
        task = bar.add_task("train", total=None)
        stats = trainer.train(samples, progress=lambda done, total: bar.update(task, completed=done, total=total))
    checkpoint = trainer.save(out)
    result = {"checkpoint": str(checkpoint), **stats.as_dict(), "skipped": skipped}
    if target is not None:
        try:
            published = publish(checkpoint, target, version)
        except PublishError as exc:
            console.print(f"[red]not published:[/red] {exc}")
            typer.echo(json.dumps(result))
            raise typer.Exit(1) from exc
        result["policy_version"] = published.policy_version
        result["publish_seconds"] = published.seconds
    typer.echo(json.dumps(result))


def register(app: typer.Typer) -> None:
    app.command("train")(train)
