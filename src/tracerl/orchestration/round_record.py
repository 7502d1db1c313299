"""What both round drivers record of a round, and the metrics row each derives from that record.

The local loop and a scheduled round get their samples differently (a warm trainer on the round it
just ran; a fresh one on the files no version claimed, crash safe), then take one path:
:func:`~tracerl.trainer.training.run.train_and_save` trains the trainer they hold and writes the
checkpoint with its manifest, :func:`trained_entry` makes the version's registry entry from that
manifest, and :func:`~tracerl.orchestration.release.release` publishes and records it. A round
with nothing to train on is recorded by :meth:`~tracerl.orchestration.registry.PolicyRegistry.record_skip`.

The training fields of both drivers' metrics rows are derived from those records, by
:func:`metrics_row` and :func:`skip_row`, so they have the same names and meanings
(:mod:`tracerl.schemas.run_metrics`); the phases' seconds come from the round's one clock.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tracerl.orchestration.registry import VersionEntry, episode_entries
from tracerl.schemas.dataset_folder import DatasetFolder
from tracerl.trainer.training.checkpoint import CHECKPOINT_MANIFEST_FILE, read_checkpoint_manifest


def checkpoint_bytes(folder: Path) -> int:
    """Bytes of a checkpoint's weights, config and tokenizer (of every checkpoint under ``folder``; 0 when it does
    not exist): its manifest is left out, as it holds paths and timings that the same seed does not reproduce."""
    if not folder.exists():
        return 0
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file() and f.name != CHECKPOINT_MANIFEST_FILE)


def trained_entry(checkpoint: Path, version: int, parent: int, dataset: DatasetFolder, policy: str | None, *,
                  seconds: dict[str, float], gate: dict[str, Any] | None = None) -> VersionEntry:
    """The registry entry of ``checkpoint``, trained from version ``parent`` on ``dataset`` (``policy``'s rows; None:
    all) to be version ``version``: the metrics and skipped rows its manifest holds, the episodes it trained on,
    ``seconds`` (the round's phases: the clock's own dict, so the entry holds every phase up to its recording)."""
    manifest = read_checkpoint_manifest(checkpoint)
    if manifest is None:
        raise ValueError(f"{checkpoint} has no {CHECKPOINT_MANIFEST_FILE}: train it with train_and_save, which writes one")
    trained_on = manifest["dataset"]
    return VersionEntry(
        version, "trained", parent, str(checkpoint), episodes=episode_entries(dataset.episodes(policy)),
        metrics=manifest["metrics"], skipped=trained_on["skipped"],
        dataset={"path": trained_on["path"], "files": sorted(f.name for f in dataset.files()), "manifest": trained_on["manifest"]},
        checkpoint_bytes=checkpoint_bytes(checkpoint), seconds=seconds, eval_reward=gate["eval_reward"] if gate else None, gate=gate,
    )


def time_fields(seconds: dict[str, float]) -> dict[str, float]:
    """A row's time: each phase's ``<phase>_seconds`` and ``seconds``, their sum."""
    return {**{f"{phase}_seconds": value for phase, value in seconds.items()}, "seconds": round(sum(seconds.values()), 3)}


def metrics_row(entry: dict[str, Any]) -> dict[str, Any]:
    """The training fields of a metrics row, from the registry entry of the version a round made."""
    trainer = {name: value for name, value in (entry.get("metrics") or {}).items() if name != "seconds"}  # its own timer: the clock's is the row's
    held = bool((entry.get("gate") or {}).get("held"))
    return {
        "policy_version": entry["parent"], "version": entry["version"], "status": "held" if held else "trained",
        "episodes": len(entry.get("episodes") or []), **trainer, "skipped": entry.get("skipped") or {},
        "checkpoint_bytes": entry.get("checkpoint_bytes"), **({"eval_reward": entry["eval_reward"]} if "eval_reward" in entry else {}),
        **time_fields(entry.get("seconds") or {}),
    }


def skip_row(record: dict[str, Any]) -> dict[str, Any]:
    """The training fields of a metrics row, from the registry's record of a round with nothing to train on."""
    return {"status": "skipped", "episodes": record["episodes"], "reason": record["reason"]}
