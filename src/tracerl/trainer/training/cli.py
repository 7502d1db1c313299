"""``tracerl train``: one training pass over a dataset folder, a new checkpoint, an optional publish."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from tracerl.core.commands import command_group
from tracerl.trainer.publish import TARGET_KINDS, BuiltinServer
from tracerl.trainer.training.backends import DEFAULT_BACKEND
from tracerl.trainer.training.config import TrainConfig
from tracerl.trainer.training.options import TrainingOverrides, with_training_options

console = Console(stderr=True)


def train(
    ctx: typer.Context,
    dataset: Optional[Path] = typer.Option(None, "--dataset", help="Folder written by `tracerl pipeline build-dataset` (required)."),
    model: Optional[Path] = typer.Option(None, "--model", help="Hugging Face checkpoint of the current policy (required)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Where to write the new checkpoint (required)."),
    server: Optional[str] = typer.Option(None, "--server", help="Policy endpoint to refresh, e.g. http://127.0.0.1:8000/v1"),
    server_kind: str = typer.Option(
        BuiltinServer.kind, "--server-kind", help=f"What serves at --server: {', '.join(sorted(TARGET_KINDS))} ({BuiltinServer.kind}: `tracerl serve`)."
    ),
    version: Optional[int] = typer.Option(None, "--version", help="Policy version to announce (default: the server's next)."),
    seed: int = typer.Option(TrainConfig.seed, "--seed"),
    max_policy_lag: Optional[int] = typer.Option(
        None, "--max-policy-lag", min=0, metavar="K",
        help="Skip rows sampled more than K versions before the policy trained (--model's version, else the dataset's newest).",
    ),
    training: TrainingOverrides = TrainingOverrides(),
) -> None:
    """One clipped policy-gradient pass over a dataset: a new checkpoint with its manifest, optionally published.

    `tracerl train run` and `tracerl train loop` are the scheduled rounds (src/tracerl/trainer/README.md).
    """
    if ctx.invoked_subcommand is not None:
        return
    missing = [name for name, value in (("--dataset", dataset), ("--model", model), ("--out", out)) if value is None]
    if missing:
        raise typer.BadParameter("missing: tracerl train --dataset DATASET --model CKPT --out CKPT-next", param_hint=", ".join(missing))
    from tracerl.trainer.publish import PublishError, publish, target_for
    from tracerl.trainer.training.checkpoint import write_checkpoint_manifest
    from tracerl.trainer.training.dataset import DatasetError
    from tracerl.trainer.training.run import train_checkpoint

    from tracerl.trainer.training.model_folder import ModelFolderError, inspect_policy_folder

    backend, config, backend_options = training.apply(DEFAULT_BACKEND, TrainConfig(seed=seed), {})
    from tracerl.trainer.trackers import TrackerError, check_trackers

    try:
        check_trackers(config.report_to)  # a package missing: said now, not after the training
    except TrackerError as exc:
        raise typer.BadParameter(str(exc), param_hint="--report-to") from None
    try:
        inspect_policy_folder(model)
    except ModelFolderError as exc:
        raise typer.BadParameter(str(exc), param_hint="--model") from None
    try:
        target = target_for(server, server_kind) if server else None
    except PublishError as exc:
        raise typer.BadParameter(str(exc), param_hint="--server-kind") from exc
    try:
        # stdout is the JSON line alone: what the libraries print or log there (DeepSpeed's logger
        # binds sys.stdout when first imported, OpenRLHF prints) goes to stderr
        with contextlib.redirect_stdout(sys.stderr):
            trained = train_checkpoint(
                dataset, model, out, backend=backend, config=config, options=backend_options[backend],
                max_policy_lag=max_policy_lag, version=version,
            )
    except DatasetError as exc:
        raise typer.BadParameter(str(exc), param_hint="--dataset") from exc
    from tracerl.trainer.training.device import end_process_group

    end_process_group()  # every rank has saved; publishing is rank 0's alone
    checkpoint, manifest, stats, skipped = trained.checkpoint, trained.manifest, trained.metrics, trained.skipped
    if not trained.lead:
        return
    result = {"checkpoint": str(checkpoint), "backend": backend, **stats.as_dict(), "skipped": skipped}
    if target is not None:
        try:
            published = publish(checkpoint, target, version)
        except PublishError as exc:
            console.print(f"[red]not published:[/red] {exc}")
            report(config.report_to, out, manifest, result, server=server)
            typer.echo(json.dumps(result))
            raise typer.Exit(1) from exc
        write_checkpoint_manifest(checkpoint, {**manifest, "policy_version": published.policy_version})
        result["policy_version"] = published.policy_version
        result["publish_seconds"] = published.seconds
    report(config.report_to, out, manifest, result, server=server)
    typer.echo(json.dumps(result))


def report(trackers: tuple[str, ...], out: Path, manifest: dict, result: dict, **more: object) -> None:
    """The pass to ``--report-to``'s trackers: its config and options, then its result row at step = the version it
    was announced as (else its parent's + 1, else 0). One run per pass, named after ``--out``; TensorBoard's
    event files go to ``OUT/../tensorboard/NAME``, so one ``--logdir`` shows the passes of a folder together."""
    if not trackers:
        return
    from tracerl.trainer.trackers import TrackerRun, open_trackers

    parent = manifest.get("parent_version")
    step = result.get("policy_version", manifest.get("policy_version"))
    step = step if step is not None else (parent + 1 if parent is not None else 0)
    config = {"out": str(out.resolve()), "model": manifest.get("parent"), "dataset": manifest.get("dataset", {}).get("path"),
              "backend": manifest.get("backend"), "version": manifest.get("policy_version"), **more, "train": manifest.get("config")}
    run = TrackerRun(out.resolve().name, out.resolve().parent)
    with open_trackers(trackers, run, config) as opened:
        opened.log({k: v for k, v in result.items() if k != "checkpoint"}, step)


def register(app: typer.Typer) -> typer.Typer:
    """Add ``tracerl train`` to ``app``; return it, a group to which the scheduled rounds add ``run`` and ``loop``."""
    group = command_group(invoke_without_command=True)
    group.callback()(with_training_options(train))
    app.add_typer(group, name="train")
    return group
