"""The dataset folder: what ``pipeline build-dataset`` writes and everything downstream reads.

::

    OUT/
      transitions-<time>-<id>.parquet   the dataset (DATASET_SCHEMA rows): the only Parquet files in OUT
      .manifest.json                    how it was built: inputs, options, counts, watermark, outputs,
                                        and the schema version of the rows

One type for every reader (the trainer, the rounds, the loop, exports, ``tracerl sql``), so the
layout, the version check and the questions asked of a folder (its episodes, its rows per policy)
are answered in one place, each from one read of the files. The writer's side (the manifest's
atomic write, incremental builds' watermark, the exports beside OUT) is
:mod:`tracerl.pipeline.build_output`.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tracerl.schemas import attributes as A
from tracerl.schemas.dataset import DATASET_SCHEMA, DATASET_SCHEMA_VERSION

MANIFEST_FILE = A.DATASET_MANIFEST_FILE
MANIFEST_SCHEMA_VERSION = A.DATASET_MANIFEST_SCHEMA_VERSION
FILES_GLOB = A.DATASET_FILES_GLOB
_INDEX_COLUMNS = ["episode_id", "policy_version", "policy_name"]


class DatasetError(ValueError):
    """The folder cannot be trained on; the message says why and what to run."""


class DatasetVersionError(DatasetError):
    """The dataset was built with another schema version than this tracerl reads."""


def transition_files(folder: str | os.PathLike) -> list[Path]:
    """The dataset's files in name order (the order the build wrote them)."""
    return sorted(Path(folder).glob(FILES_GLOB))


def episodes_of(index: pa.Table, policy: str | None = None) -> dict[str, list[int]]:
    """Each episode of an index (rows' episode, version, policy; with ``policy``: the episodes it has rows
    in) and the policy versions that sampled its calls."""
    if policy is not None:
        index = index.filter(pc.equal(index.column("policy_name"), policy))
    versions: dict[str, set[int]] = {}
    for episode, version in zip(index.column("episode_id").to_pylist(), index.column("policy_version").to_pylist()):
        found = versions.setdefault(episode, set())
        if version is not None:
            found.add(version)
    return {episode: sorted(v) for episode, v in versions.items()}


def index_of(files: list[Path]) -> pa.Table:
    """Every row's episode, policy version and policy name, from ``files`` (their light columns only)."""
    if not files:
        return pa.schema([DATASET_SCHEMA.field(c) for c in _INDEX_COLUMNS]).empty_table()
    return pa.concat_tables(pq.read_table(f, columns=_INDEX_COLUMNS) for f in files)


@dataclass(frozen=True)
class DatasetFolder:
    """A dataset folder, read lazily: files listed on demand, the rows' index read once."""

    path: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))

    def files(self) -> list[Path]:
        return transition_files(self.path)

    def manifest(self) -> dict[str, Any]:
        """The manifest as written (``FileNotFoundError`` naming it when the folder has none)."""
        return json.loads((self.path / MANIFEST_FILE).read_text(encoding="utf-8"))

    def checked_manifest(self) -> dict[str, Any]:
        """The manifest, once its schema version is the one this tracerl reads (:class:`DatasetVersionError` else,
        saying how to rebuild): a dataset of another version may hold columns of the same name with another meaning."""
        path = self.path / MANIFEST_FILE
        rebuild = f"rebuild it with `pipeline build-dataset --spans SPANS --out {self.path}`"
        if not path.is_file():
            raise DatasetVersionError(
                f"{self.path} has no {MANIFEST_FILE}, so the schema version of its transitions is unknown "
                f"(a folder written by `pipeline build-dataset` always has one): {rebuild}"
            )
        try:
            manifest = self.manifest()
            found = manifest[MANIFEST_SCHEMA_VERSION]
        except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as exc:
            raise DatasetVersionError(f"{path} is not a dataset manifest with a {MANIFEST_SCHEMA_VERSION!r} ({exc!r}): {rebuild}") from None
        if found != DATASET_SCHEMA_VERSION:
            spans = (manifest.get("inputs") or {}).get("spans") or "SPANS"
            raise DatasetVersionError(
                f"{self.path} holds dataset schema version {found}, and this tracerl trains on version "
                f"{DATASET_SCHEMA_VERSION}: rebuild it from its spans with "
                f"`pipeline build-dataset --spans {spans} --out {self.path}`"
            )
        return manifest

    @cached_property
    def index(self) -> pa.Table:
        """Every row's episode, policy version and policy name (read once, on first use)."""
        return index_of(self.files())

    def episodes(self, policy: str | None = None) -> dict[str, list[int]]:
        """Each episode (with ``policy``: that policy has rows in) and the policy versions that sampled its calls."""
        return episodes_of(self.index, policy)

    def rows(self, policy: str | None = None) -> int:
        """The transitions (with ``policy``: that policy's)."""
        if policy is None:
            return self.index.num_rows
        return pc.sum(pc.equal(self.index.column("policy_name"), policy)).as_py() or 0

    def table(self) -> pa.Table:
        """Every transition, all columns, in (episode, step) order (for tests and small tools)."""
        files = self.files()
        if not files:
            return DATASET_SCHEMA.empty_table()
        return pa.concat_tables(pq.read_table(f) for f in files).sort_by([("episode_id", "ascending"), ("step", "ascending")])
