"""The end of every round, whoever drives it: publish a checkpoint as the next policy version, record it, prune.

The local loop (:mod:`tracerl.orchestration.local.run`), a scheduled round
(:mod:`tracerl.orchestration.rounds.round`) and a rollback differ in how they get a checkpoint
(a warm trainer in process, a fresh one from the parent checkpoint after a crash-safe plan, a
copy of an older version); from there they do one thing, here: every endpoint serves it as
``version`` (``publish``), the registry records the version with where it went
(:class:`~tracerl.orchestration.registry.VersionEntry`), and all but the newest
``keep`` checkpoints lose their weights. The phases are timed on the driver's
:class:`~tracerl.orchestration.phases.PhaseClock`.

A publish that fails raises :class:`~tracerl.trainer.publish.PublishError` before anything is
recorded: the driver decides what a failed version means (the loop rolls its trainer back, a
scheduled round stops and publishes the same checkpoint again on its next run).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from tracerl.orchestration.phases import PhaseClock
from tracerl.orchestration.registry import PolicyRegistry, VersionEntry, publish_record, utc_now
from tracerl.trainer.publish import PublishTarget, publish
from tracerl.trainer.training.checkpoint import prune_checkpoints


def release(registry: PolicyRegistry, entry: VersionEntry, targets: Sequence[PublishTarget], *, keep: int = 0,
            clock: PhaseClock | None = None) -> dict[str, Any]:
    """Publish ``entry``'s checkpoint as its version to every target, record the entry with what each answered,
    prune (``keep`` 0: nothing); the registry entry as written."""
    clock = clock or PhaseClock()
    with clock("publish"):
        published = [publish_record(publish(Path(entry.checkpoint), target, version=entry.version), target) for target in targets]
    with clock("record"):
        recorded = registry.append(replace(entry, published=[*entry.published, *published], recorded_at=utc_now()))
        prune_versions(registry, keep)
    return recorded


def prune_versions(registry: PolicyRegistry, keep: int) -> list[Path]:
    """Delete the weights of all but the newest ``keep`` versions, never those of the served version
    (what the next round trains from) or of a pinned one. A base model outside the registry's folder is the
    user's and is never touched; one the run made there (a LoRA run's starting adapter) is pruned like the rest."""
    if keep <= 0:
        return []
    home = registry.path.parent.resolve()
    entries = [e for e in registry.entries() if e["kind"] != "base" or Path(e["checkpoint"]).resolve().is_relative_to(home)]
    current = registry.current()
    protected = {Path(e["checkpoint"]) for e in entries if e.get("pinned")} | ({Path(current["checkpoint"])} if current else set())
    return prune_checkpoints([Path(e["checkpoint"]) for e in entries], keep=keep, protected=protected)
