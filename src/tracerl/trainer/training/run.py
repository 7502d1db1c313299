"""One training pass, from a dataset folder and a checkpoint to a new checkpoint with its manifest.

``tracerl train`` and the scheduled rounds (``tracerl train run``,
:mod:`tracerl.orchestration.rounds`) both train through :func:`train_checkpoint`, so a round's
checkpoint is exactly what ``tracerl train`` would have written from the same inputs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from tracerl.trainer.training.backend import TrainMetrics
from tracerl.trainer.training.backends import load_trainer
from tracerl.trainer.training.config import OpenRLHFOptions, TrainConfig

console = Console(stderr=True)


@dataclass(frozen=True)
class TrainedCheckpoint:
    checkpoint: Path
    manifest: dict  # what the checkpoint's tracerl_checkpoint.json holds
    metrics: TrainMetrics
    skipped: dict[str, int]  # dataset rows not trained on, by reason
    lead: bool  # False on the ranks of a multi-GPU launch that neither report nor publish


def train_checkpoint(
    dataset: Path, model: Path, out: Path, *, backend: str = "torch", config: TrainConfig | None = None,
    options: OpenRLHFOptions | None = None, max_policy_lag: int | None = None, version: int | None = None,
    on_saving: Callable[[], None] | None = None, optimizer_state: bool = True, policy: str | None = None,
) -> TrainedCheckpoint:
    """Train ``model`` on ``dataset`` with ``backend`` and write the checkpoint to ``out``.

    ``optimizer_state``: save what the next process needs to resume the optimizer (torch backend).
    ``version`` is the policy version the checkpoint will be announced as (None: whatever the
    endpoint numbers it). ``on_saving`` is called when training is done and writing the
    checkpoint starts (a scheduled round reports its phases). ``policy``: only that policy's rows (a dataset
    built with several ``--policy``). Raises :class:`~tracerl.trainer.training.dataset.DatasetError` for a
    dataset that cannot be trained on.
    """
    from tracerl.trainer.training.checkpoint import read_checkpoint_manifest
    from tracerl.schemas.dataset_folder import DatasetFolder
    from tracerl.trainer.training.dataset import read_dataset

    config = config or TrainConfig()
    parent_version = (read_checkpoint_manifest(model) or {}).get("policy_version")
    samples, skipped = read_dataset(dataset, max_policy_lag=max_policy_lag, policy_version=parent_version, policy=policy)
    dataset_manifest = DatasetFolder(dataset).checked_manifest()
    options = options or OpenRLHFOptions()
    trainer = load_trainer(backend, model, config, options)
    lead = trainer.rank == 0  # under a multi-GPU launcher, rank 0 speaks and publishes
    if lead:
        console.print(f"training with {backend} on {trainer.device}, learning rate {trainer.learning_rate:g}, "
                      f"micro-batch {trainer.micro_batch_size} x {trainer.world_size} process(es)", style="dim")
    with Progress(TextColumn("training"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console, disable=not lead) as bar:
        task = bar.add_task("train", total=None)
        stats = trainer.train(samples, progress=lambda done, total: bar.update(task, completed=done, total=total))
    manifest = {
        "backend": backend,
        "parent": str(model.resolve()),
        "parent_version": parent_version,
        "policy_version": version,
        "dataset": {"path": str(dataset.resolve()), "manifest": dataset_manifest, "skipped": skipped},
        "config": {**asdict(config), "learning_rate": trainer.learning_rate, **({"openrlhf": asdict(options)} if backend == "openrlhf" else {})},
        "metrics": stats.as_dict(),
    }
    if on_saving:
        on_saving()
    checkpoint = trainer.save(out, manifest, optimizer_state=optimizer_state)
    return TrainedCheckpoint(checkpoint, manifest, stats, skipped, lead)
