"""One training pass, from samples and a trainer to a new checkpoint with its manifest.

Every driver trains through :func:`train_and_save`: ``tracerl train`` and the scheduled rounds
(``tracerl train run``, :mod:`tracerl.orchestration.rounds`) by :func:`train_checkpoint`, which
reads the dataset and loads a trainer from the parent checkpoint first; the local loop
(:mod:`tracerl.orchestration.local`) with the warm trainer it holds across rounds. So every
checkpoint carries the same manifest, and a round's checkpoint is exactly what ``tracerl train``
would have written from the same inputs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from tracerl.trainer.training.backend import PolicyGradientTrainer, TrainMetrics
from tracerl.trainer.training.backends import backend_named, load_trainer
from tracerl.trainer.training.config import TrainConfig
from tracerl.trainer.training.dataset import Sample

console = Console(stderr=True)


@dataclass(frozen=True)
class TrainedCheckpoint:
    checkpoint: Path
    manifest: dict  # what the checkpoint's tracerl_checkpoint.json holds
    metrics: TrainMetrics
    skipped: dict[str, int]  # dataset rows not trained on, by reason
    lead: bool  # False on the ranks of a multi-GPU launch that neither report nor publish


def train_and_save(
    trainer: PolicyGradientTrainer, samples: Sequence[Sample], skipped: dict[str, int], *, dataset: Path, parent: Path,
    parent_version: int | None, out: Path, backend: str, options: Any = None, version: int | None = None,
    on_saving: Callable[[], None] | None = None, optimizer_state: bool = False, progress: Callable[[int, int], None] | None = None,
) -> TrainedCheckpoint:
    """Train ``trainer`` (on ``parent``'s weights: just loaded, or kept warm since it trained them) on ``samples``,
    read from ``dataset`` (``skipped``: its rows left out, by reason), and write the checkpoint to ``out`` with its
    manifest: where it came from (``parent``, ``parent_version``, the dataset's manifest), the backend and its
    options, the config and the metrics.

    ``version`` is the policy version the checkpoint will be announced as (None: whatever the endpoint numbers it).
    ``on_saving`` is called when training is done and writing the checkpoint starts (the drivers' clocks mark a
    phase there). ``optimizer_state``: save what the next process needs to resume the optimizer (torch backend;
    a trainer kept warm keeps its own).
    """
    from tracerl.schemas.dataset_folder import DatasetFolder

    dataset_manifest = DatasetFolder(dataset).checked_manifest()
    stats = trainer.train(samples, progress=progress)
    manifest = {
        "backend": backend,
        "parent": str(Path(parent).resolve()),
        "parent_version": parent_version,
        "policy_version": version,
        "dataset": {"path": str(Path(dataset).resolve()), "manifest": dataset_manifest, "skipped": skipped},
        "config": {**asdict(trainer.config), "learning_rate": trainer.learning_rate,
                   **backend_named(backend).options_record(options)},
        "metrics": stats.as_dict(),
    }
    if on_saving:
        on_saving()
    checkpoint = trainer.save(out, manifest, optimizer_state=optimizer_state)
    return TrainedCheckpoint(checkpoint, manifest, stats, skipped, trainer.rank == 0)


def train_checkpoint(
    dataset: Path, model: Path, out: Path, *, backend: str = "torch", config: TrainConfig | None = None,
    options: Any = None, max_policy_lag: int | None = None, version: int | None = None,
    on_saving: Callable[[], None] | None = None, optimizer_state: bool = True, policy: str | None = None,
) -> TrainedCheckpoint:
    """Train ``model`` on ``dataset`` with a trainer of ``backend`` loaded here, and write the checkpoint to ``out``
    (:func:`train_and_save`).

    ``policy``: only that policy's rows (a dataset built with several ``--policy``). Raises
    :class:`~tracerl.trainer.training.dataset.DatasetError` for a dataset that cannot be trained on.
    """
    from tracerl.trainer.training.checkpoint import read_checkpoint_manifest
    from tracerl.trainer.training.dataset import read_dataset

    config = config or TrainConfig()
    parent_version = (read_checkpoint_manifest(model) or {}).get("policy_version")
    samples, skipped = read_dataset(dataset, max_policy_lag=max_policy_lag, policy_version=parent_version, policy=policy)
    trainer = load_trainer(backend, model, config, options)
    lead = trainer.rank == 0  # under a multi-GPU launcher, rank 0 speaks and publishes
    if lead:
        console.print(f"training with {backend} on {trainer.device}, learning rate {trainer.learning_rate:g}, "
                      f"micro-batch {trainer.micro_batch_size} x {trainer.world_size} process(es)", style="dim")
    with Progress(TextColumn("training"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console, disable=not lead) as bar:
        task = bar.add_task("train", total=None)
        return train_and_save(trainer, samples, skipped, dataset=dataset, parent=model, parent_version=parent_version, out=out,
                              backend=backend, options=options, version=version, on_saving=on_saving, optimizer_state=optimizer_state,
                              progress=lambda done, total: bar.update(task, completed=done, total=total))
