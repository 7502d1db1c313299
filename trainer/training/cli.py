"""``tracerl train``: one training pass over a dataset folder, a new checkpoint, an optional publish."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from tracerl.trainer.publish import TARGET_KINDS, BuiltinServer
from tracerl.trainer.training.config import BACKENDS, OpenRLHFOptions, TrainConfig

console = Console(stderr=True)


def train(
    ctx: typer.Context,
    dataset: Optional[Path] = typer.Option(None, "--dataset", help="Folder written by `tracerl pipeline build-dataset` (required)."),
    model: Optional[Path] = typer.Option(None, "--model", help="Hugging Face checkpoint of the current policy (required)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Where to write the new checkpoint (required)."),
    backend: str = typer.Option(
        BACKENDS[0], "--backend", help=f"{' or '.join(BACKENDS)}: torch is the built-in CPU trainer, openrlhf trains on GPUs (trainer/README.md)."
    ),
    server: Optional[str] = typer.Option(None, "--server", help="Policy endpoint to refresh, e.g. http://127.0.0.1:8000/v1"),
    server_kind: str = typer.Option(
        BuiltinServer.kind, "--server-kind", help=f"What serves at --server: {', '.join(sorted(TARGET_KINDS))} ({BuiltinServer.kind}: `tracerl serve`)."
    ),
    version: Optional[int] = typer.Option(None, "--version", help="Policy version to announce (default: the server's next)."),
    learning_rate: float = typer.Option(TrainConfig.learning_rate, "--lr"),
    epochs: int = typer.Option(TrainConfig.epochs, "--epochs", min=1, help="Passes over the batch."),
    minibatch_size: int = typer.Option(TrainConfig.minibatch_size, "--minibatch-size", min=1, help="Samples per optimizer step (over all GPUs)."),
    clip_epsilon: float = typer.Option(TrainConfig.clip_epsilon, "--clip", min=0.0, help="PPO clip range of the importance ratio."),
    seed: int = typer.Option(TrainConfig.seed, "--seed"),
    max_policy_lag: Optional[int] = typer.Option(
        None, "--max-policy-lag", min=0, metavar="K",
        help="Skip rows sampled more than K versions before the policy trained (--model's version, else the dataset's newest).",
    ),
    zero_stage: int = typer.Option(OpenRLHFOptions.zero_stage, "--zero-stage", min=0, max=3, help="openrlhf: DeepSpeed ZeRO stage."),
    dtype: Optional[str] = typer.Option(None, "--dtype", help="openrlhf: bf16, fp16 or fp32 (default: bf16 with CUDA, fp32 without)."),
    lora_rank: int = typer.Option(OpenRLHFOptions.lora_rank, "--lora-rank", min=0, help="openrlhf: train and save a LoRA adapter of this rank."),
    lora_alpha: int = typer.Option(OpenRLHFOptions.lora_alpha, "--lora-alpha", min=1, help="openrlhf: LoRA scale numerator."),
    gradient_checkpointing: bool = typer.Option(False, "--gradient-checkpointing", help="openrlhf: recompute activations to save memory."),
    ref_model: Optional[Path] = typer.Option(None, "--ref-model", help="openrlhf: frozen reference policy of a KL penalty (with --kl-coef)."),
    kl_coef: float = typer.Option(OpenRLHFOptions.kl_coef, "--kl-coef", min=0.0, help="openrlhf: weight of the k3 KL to --ref-model."),
) -> None:
    """One clipped policy-gradient pass over a dataset: a new checkpoint with its manifest, optionally published.

    `tracerl train run` and `tracerl train loop` are the scheduled rounds (trainer/README.md).
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

    if backend not in BACKENDS:
        raise typer.BadParameter(f"unknown backend {backend!r}: use {' or '.join(BACKENDS)}", param_hint="--backend")
    if not (model / "config.json").exists():
        raise typer.BadParameter(f"{model} is not a Hugging Face checkpoint (no config.json)", param_hint="--model")
    if kl_coef > 0 and ref_model is None:
        raise typer.BadParameter("a KL penalty needs the policy to stay close to: pass --ref-model too", param_hint="--kl-coef")
    try:
        target = target_for(server, server_kind) if server else None
    except PublishError as exc:
        raise typer.BadParameter(str(exc), param_hint="--server-kind") from exc
    config = TrainConfig(learning_rate=learning_rate, epochs=epochs, minibatch_size=minibatch_size, clip_epsilon=clip_epsilon, seed=seed)
    options = OpenRLHFOptions(
        zero_stage=zero_stage, dtype=dtype, lora_rank=lora_rank, lora_alpha=lora_alpha, gradient_checkpointing=gradient_checkpointing,
        reference_model=str(ref_model) if ref_model else None, kl_coef=kl_coef,
    )
    try:
        # stdout is the JSON line alone: what the libraries print or log there (DeepSpeed's logger
        # binds sys.stdout when first imported, OpenRLHF prints) goes to stderr
        with contextlib.redirect_stdout(sys.stderr):
            trained = train_checkpoint(
                dataset, model, out, backend=backend, config=config, options=options if backend == "openrlhf" else None,
                max_policy_lag=max_policy_lag, version=version,
            )
    except DatasetError as exc:
        raise typer.BadParameter(str(exc), param_hint="--dataset") from exc
    checkpoint, manifest, stats, skipped = trained.checkpoint, trained.manifest, trained.metrics, trained.skipped
    if not trained.lead:
        return
    result = {"checkpoint": str(checkpoint), "backend": backend, **stats.as_dict(), "skipped": skipped}
    if target is not None:
        try:
            published = publish(checkpoint, target, version)
        except PublishError as exc:
            console.print(f"[red]not published:[/red] {exc}")
            typer.echo(json.dumps(result))
            raise typer.Exit(1) from exc
        write_checkpoint_manifest(checkpoint, {**manifest, "policy_version": published.policy_version})
        result["policy_version"] = published.policy_version
        result["publish_seconds"] = published.seconds
    typer.echo(json.dumps(result))


def register(app: typer.Typer) -> typer.Typer:
    """Add ``tracerl train`` to ``app``; return it, a group to which the scheduled rounds add ``run`` and ``loop``."""
    group = typer.Typer(invoke_without_command=True, add_completion=False)
    group.callback()(train)
    app.add_typer(group, name="train")
    return group
