"""The policy registry: which data made which policy, and where and when it was served.

One JSON file next to the checkpoints (``STATE/registry.json``), rewritten whole (written
beside, fsynced, renamed) each time a version is recorded, so a reader or a job killed
mid-write sees the old table or the new one. Each entry is a policy version:

- ``version``, ``kind`` (``base``: the starting policy; ``trained``: a round; ``rollback``: an
  older checkpoint published again as a new version, so spans stay unambiguous), ``parent``
  (the version it was trained from or rolled back to), ``checkpoint``;
- for trained versions: ``dataset`` (the round's folder, its files, the build manifest),
  ``episodes`` (id and the policy versions that sampled it), ``metrics``, ``skipped``,
  ``checkpoint_bytes``, ``seconds`` (its round's phases, up to its publish);
- ``published``: each endpoint, the version it serves it as, how long it took and when;
  ``recorded_at``; ``pinned`` (``tracerl policy pin``): its weights are kept whatever
  ``keep_checkpoints`` says; with an eval command, ``eval_reward`` and the ``gate`` decision (a version it
  held back was never published; the next round trains from the one before).

Beside the versions, ``skipped``: the rounds that had nothing to train on (their files, episodes,
why, when), recorded by both drivers. The episodes a version trained on are its files' episodes;
the files every version claimed, or a skipped round set aside, are the watermark of the next
scheduled round (:mod:`tracerl.orchestration.rounds.round`). Both drivers' metrics rows are
derived from these entries (:mod:`tracerl.orchestration.round_record`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from tracerl.core.storage import write_atomic
from tracerl.trainer.publish import PublishResult, PublishTarget

REGISTRY_FILE = "registry.json"


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def publish_record(result: PublishResult, target: PublishTarget) -> dict[str, Any]:
    """What the registry keeps of one publish: where, as which version, how fast, when."""
    return {"endpoint": target.base_url, "kind": target.kind, "policy_version": result.policy_version, "seconds": round(result.seconds, 3),
            "at": utc_now()}


def episode_entries(episodes: dict[str, list[int]]) -> list[dict[str, Any]]:
    """A trained version's ``episodes``: each id with the policy versions that sampled its calls."""
    return [{"episode_id": e, "policy_versions": v} for e, v in sorted(episodes.items())]


@dataclass
class VersionEntry:
    """One policy version, as every writer of a registry records it (the local loop, a scheduled round,
    a rollback): one shape, whoever made the version."""

    version: int
    kind: str  # base | trained | rollback
    parent: int | None
    checkpoint: str
    published: list[dict[str, Any]] = field(default_factory=list)
    # trained versions: the episodes (id, the versions that sampled it), the trainer's metrics and skips
    episodes: list[dict[str, Any]] | None = None
    metrics: dict[str, Any] | None = None
    skipped: dict[str, Any] | None = None
    # trained versions: the round's dataset folder (path, files, build manifest), the checkpoint's size, its phases' seconds;
    # a scheduled round's gate
    dataset: dict[str, Any] | None = None
    checkpoint_bytes: int | None = None
    seconds: dict[str, float] | None = None
    eval_reward: float | None = None
    gate: dict[str, Any] | None = None
    recorded_at: str = field(default_factory=utc_now)

    def as_dict(self) -> dict[str, Any]:
        """The JSON entry: a trained version's episodes, metrics and skips always; the round's fields where it has them."""
        entry = {"version": self.version, "kind": self.kind, "parent": self.parent, "checkpoint": self.checkpoint}
        if self.kind == "trained":
            entry |= {"episodes": self.episodes or [], "metrics": self.metrics, "skipped": self.skipped}
        for name in ("dataset", "checkpoint_bytes", "seconds", "eval_reward", "gate"):
            if getattr(self, name) is not None:
                entry[name] = getattr(self, name)
        if self.seconds is not None:  # a driver's clock goes on in the dict it lent: the entry keeps the phases as of now
            entry["seconds"] = dict(self.seconds)
        return entry | {"published": self.published, "recorded_at": self.recorded_at}


class RegistryError(ValueError):
    """The registry cannot answer; the message says what to do."""


class PolicyRegistry:
    def __init__(self, state: Path) -> None:
        self.path = Path(state) / REGISTRY_FILE

    def _read(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The versions and the skipped rounds, oldest first, from one read of the file (a question about both,
        or a rewrite of one, sees them as of the same moment); both empty before anything is recorded."""
        if not self.path.is_file():
            return [], []
        try:
            body = json.loads(self.path.read_text(encoding="utf-8"))
            return body["policies"], body.get("skipped", [])
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise RegistryError(f"{self.path} is not a policy registry ({exc}); restore it from a backup") from None

    def entries(self) -> list[dict[str, Any]]:
        """Every recorded version, oldest first."""
        return self._read()[0]

    def latest(self) -> dict[str, Any] | None:
        entries = self.entries()
        return entries[-1] if entries else None

    def current(self) -> dict[str, Any] | None:
        """The newest version the gate did not hold back: what is served, and what the next round trains."""
        served = [e for e in self.entries() if not (e.get("gate") or {}).get("held")]
        return served[-1] if served else None

    def get(self, version: int) -> dict[str, Any]:
        for entry in self.entries():
            if entry["version"] == version:
                return entry
        known = ", ".join(str(e["version"]) for e in self.entries()) or "none yet"
        raise RegistryError(f"no policy version {version} in {self.path} (versions: {known}; see `tracerl policy list`)")

    def skipped(self) -> list[dict[str, Any]]:
        """Rounds that had nothing to train on (rows too stale, empty responses), oldest first: their files, why, when."""
        return self._read()[1]

    def claimed_files(self) -> set[str]:
        """Names of the dataset files some recorded version trained on, or a skipped round set aside (one read of the
        registry: ask once, then test each file against the set)."""
        entries, skipped = self._read()
        trained = {name for entry in entries for name in (entry.get("dataset") or {}).get("files", [])}
        return trained | {name for record in skipped for name in record.get("files", [])}

    def record_skip(self, round: int, files: list[str], episodes: int, reason: str) -> dict[str, Any]:
        """Record a round that had nothing to train on (no version is made), in one shape whichever driver ran it: its
        dataset ``files`` are set aside (a scheduled round's next plan does not meet them again). Returns the record."""
        record = {"round": round, "files": sorted(files), "episodes": episodes, "reason": reason, "at": utc_now()}
        entries, skipped = self._read()
        self._write(entries, [*skipped, record])
        return record

    def set_pinned(self, version: int, pinned: bool) -> dict[str, Any]:
        """Mark ``version`` as kept (or no longer) when old checkpoints are pruned; returns its entry."""
        self.get(version)  # names the versions there are if it is not one
        entries, skipped = self._read()
        entries = [{**e, "pinned": pinned} if e["version"] == version else e for e in entries]
        self._write(entries, skipped)
        return next(e for e in entries if e["version"] == version)

    def append(self, version: VersionEntry) -> dict[str, Any]:
        """Record ``version`` as the newest (its number must follow the latest's); return its entry as written."""
        entry = version.as_dict()
        entries, skipped = self._read()
        if entries and entry["version"] != entries[-1]["version"] + 1:
            raise RegistryError(f"version {entry['version']} does not follow {entries[-1]['version']} in {self.path}")
        self._write([*entries, entry], skipped)
        return entry

    def _write(self, entries: list[dict[str, Any]], skipped: list[dict[str, Any]]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        body = {"policies": entries, **({"skipped": skipped} if skipped else {})}
        write_atomic(self.path, json.dumps(body, indent=1) + "\n")
