"""``tracerl policy rollback V``: serve an older checkpoint again, as a new version.

Spans carry the version that answered them; serving version 3's weights again as "3"
would make the spans of before and after the bad version 4 look alike to the pipeline.
So a rollback is a new version N+1 whose checkpoint is a copy of V's (hard links: no
weights are copied), published and recorded like a round, with ``kind: rollback`` and
``parent: V``. The next round trains from it.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from tracerl.core.storage import fsync_dir
from tracerl.orchestration.rounds.config import Endpoint
from tracerl.orchestration.release import release
from tracerl.orchestration.rounds.errors import RoundFailed
from tracerl.orchestration.registry import PolicyRegistry, RegistryError, VersionEntry
from tracerl.orchestration.rounds.round import StateFolder
from tracerl.trainer.publish import PublishError
from tracerl.trainer.training.checkpoint import has_weights, read_checkpoint_manifest, write_checkpoint_manifest


def rollback(state: Path, version: int, endpoints: tuple[Endpoint, ...], policy: str | None = None) -> dict[str, Any]:
    """Publish version ``version``'s checkpoint as the next version and record it; the caller holds the lock.

    ``policy``: one of several policies (``state`` is its folder): its adapter is published under its
    name, and the other policies keep serving what they serve.
    """
    folder = StateFolder(state)
    folder.remove_partials()
    registry = PolicyRegistry(state)
    old = registry.get(version)
    latest = registry.latest()
    assert latest is not None  # get() found one
    new = latest["version"] + 1
    if folder.round_dataset(new).exists():
        raise RegistryError(
            f"round {new} is planned but not recorded ({folder.round_dataset(new)}): finish it with `tracerl train run` "
            "first, then roll back (its version may already be served)"
        )
    target = folder.checkpoint(new)
    _link_copy(Path(old["checkpoint"]), target)
    manifest = read_checkpoint_manifest(target) or {}
    write_checkpoint_manifest(target, {**manifest, "policy_version": new, "rollback_of": version})
    try:
        return release(registry, VersionEntry(new, "rollback", version, str(target)), [e.target(policy) for e in endpoints])
    except PublishError as exc:
        raise RoundFailed("publish_failed", f"version {new} ({target}) not published: {exc}") from exc


def _link_copy(source: Path, target: Path) -> None:
    """``target`` as a hard-linked copy of the checkpoint ``source``, appearing whole (replacing a leftover)."""
    if not ((source / "config.json").is_file() or (source / "adapter_config.json").is_file()):
        raise RegistryError(f"{source} (the checkpoint to roll back to) is gone or not a checkpoint: it cannot be served again")
    if not has_weights(source):
        raise RegistryError(
            f"{source} (the checkpoint to roll back to) had its weights deleted: keep_checkpoints keeps only the newest "
            "versions'. Pin the versions you may want back (`tracerl policy pin V`) or raise keep_checkpoints"
        )
    partial = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    shutil.copytree(source, partial, copy_function=_link_or_copy)
    if target.exists():  # a rollback killed after its copy, before its record
        shutil.rmtree(target)
    os.replace(partial, target)
    fsync_dir(target.parent)


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)
