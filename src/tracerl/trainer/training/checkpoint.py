"""Checkpoints appear whole or not at all.

A policy server told to load a checkpoint (``tracerl.trainer.publish``) must never read
half of one, and a job killed while saving must leave the previous checkpoint usable.
So a checkpoint is written into a hidden folder beside its place, made durable, and
renamed into place in one step.

Each one carries a small manifest (:data:`CHECKPOINT_MANIFEST_FILE`): where it came from
(parent checkpoint and version, the dataset manifest it trained on), the backend and its
metrics. It is written inside the same folder, so weights and manifest appear together.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tracerl.core.storage import fsync_dir, fsync_file, write_atomic

CHECKPOINT_MANIFEST_FILE = "tracerl_checkpoint.json"


@contextmanager
def checkpoint_folder(out_dir: str | os.PathLike, manifest: dict | None = None) -> Iterator[Path]:
    """Yield an empty folder to write a checkpoint into; on success it becomes ``out_dir``.

    An existing ``out_dir`` is replaced whole. If the block raises, nothing changes.
    ``manifest`` (JSON-able) is written beside what the block wrote.
    """
    out = Path(out_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        yield tmp
        if manifest is not None:
            write_checkpoint_manifest(tmp, manifest)
        for path in tmp.rglob("*"):
            if path.is_file():
                fsync_file(path)
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        if out.exists():
            os.replace(out, old)
        os.replace(tmp, out)
        fsync_dir(out.parent)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def write_checkpoint_manifest(checkpoint: str | os.PathLike, manifest: dict) -> None:
    """Write (or replace, e.g. with the version it was published as) a checkpoint's manifest in one step."""
    write_atomic(Path(checkpoint) / CHECKPOINT_MANIFEST_FILE, json.dumps(manifest, indent=2) + "\n")


def read_checkpoint_manifest(checkpoint: str | os.PathLike) -> dict | None:
    """The manifest of a checkpoint ``tracerl train`` wrote; None for any other checkpoint."""
    path = Path(checkpoint) / CHECKPOINT_MANIFEST_FILE
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path} is not a checkpoint manifest ({exc}): delete it, or train that checkpoint again") from None


WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")


def has_weights(path: Path) -> bool:
    """Whether the checkpoint still holds its weights (:func:`prune_checkpoints` keeps only config and manifest)."""
    return path.is_dir() and any(f.is_file() and f.suffix in WEIGHT_SUFFIXES for f in path.iterdir())


def prune_checkpoints(checkpoints: list[Path], *, keep: int, protected: set[Path] = frozenset()) -> list[Path]:
    """Delete the weights of all but the newest ``keep`` of ``checkpoints`` (oldest first) and of none in ``protected``.

    A pruned checkpoint keeps its config and manifest, so what it was stays readable; its weights
    (full or adapter, and optimizer state) go. Returns the pruned folders. Why: a 1.5-3B model's
    full checkpoint is 6-12 GB, and one per round fills a disk in a few rounds.
    """
    pruned = []
    for path in checkpoints[: max(len(checkpoints) - keep, 0)]:
        if path.resolve() in {p.resolve() for p in protected}:
            continue
        weights = [f for f in path.iterdir() if f.is_file() and f.suffix in WEIGHT_SUFFIXES]
        for f in weights:
            f.unlink()
        if weights:
            pruned.append(path)
    return pruned
