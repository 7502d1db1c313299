"""The transitions dataset, read for training: one :class:`Sample` per usable row.

``pipeline build-dataset`` writes a folder of ``transitions-*.parquet`` (rows of
``schemas.dataset.DATASET_SCHEMA``) and a ``.manifest.json`` that records, among the
build's inputs and counts, the schema version of those rows. The version is checked
before anything is read: a dataset of another version may hold columns of the same
name with another meaning, and training on it would go wrong without an error.

The columns read are the fields of :class:`Sample`, looked up in ``DATASET_SCHEMA`` at
import: a column renamed or retyped there fails here at once, not in the middle of a run.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from tracerl.schemas.dataset import DATASET_SCHEMA
from tracerl.schemas.dataset_folder import FILES_GLOB, MANIFEST_FILE, DatasetError, DatasetFolder

__all__ = ["DatasetError", "EmptyDatasetError", "Sample", "StaleDatasetError", "read_dataset"]


class EmptyDatasetError(DatasetError):
    """The dataset holds no usable transition."""


class StaleDatasetError(EmptyDatasetError):
    """Every row was sampled by a policy too many versions old: nothing to train, and nothing wrong with the data."""


@dataclass
class Sample:
    """One LLM call to learn from. Field names are ``DATASET_SCHEMA`` column names."""

    prompt_token_ids: list[int]
    response_token_ids: list[int]
    advantage: float
    # log-probs the server sampled with (the behaviour policy), None when it logged none
    response_logprobs: list[float] | None = None
    response_mask: list[int] | None = None  # 1 where the token is the policy's action
    policy_version: int | None = None  # the version that sampled it
    policy_name: str | None = None  # the policy (served model name) that sampled it
    target_only: bool = False  # supervised sample (warm start): advantage is ignored


_NOT_COLUMNS = {"target_only"}
SAMPLE_COLUMNS = pa.schema([DATASET_SCHEMA.field(f.name) for f in fields(Sample) if f.name not in _NOT_COLUMNS])


def read_dataset(
    dataset_dir: str | os.PathLike, *, max_policy_lag: int | None = None, policy_version: int | None = None,
    policy: str | None = None,
) -> tuple[list[Sample], dict[str, int]]:
    """Samples from the dataset folder; also how many rows were skipped, by reason.

    With ``policy``, only that policy's rows (``policy_name``): one dataset built with
    several ``--policy`` holds the transitions of each, and each policy trains on its own.

    With ``max_policy_lag`` K, rows sampled by a policy more than K versions older than
    ``policy_version`` (the policy about to be trained; None: the newest version in the
    dataset) are skipped: the importance ratio of so stale a sample is too far from 1 for
    clipping to keep the update safe. Rows with no policy version are skipped then too.
    """
    folder = DatasetFolder(dataset_dir)
    files = folder.files()
    if not files and not (folder.path / MANIFEST_FILE).exists():
        raise EmptyDatasetError(f"no {FILES_GLOB} in {folder.path}: run `tracerl pipeline build-dataset` first")
    manifest = folder.checked_manifest()
    if not files:
        notes = "; ".join(manifest.get("warnings") or []) or "see its manifest's counts"
        raise EmptyDatasetError(f"{folder.path} holds no transitions ({notes})")
    table = pa.concat_tables(_read_columns(f) for f in files)
    samples: list[Sample] = []
    skipped: dict[str, int] = {}

    def skip(reason: str) -> None:
        skipped[reason] = skipped.get(reason, 0) + 1

    for row in table.to_pylist():
        sample = Sample(**row)
        if policy is not None and sample.policy_name != policy:
            continue
        if not sample.response_token_ids:
            skip("empty response")
            continue
        if sample.advantage is None or not math.isfinite(sample.advantage):
            skip("non-finite advantage")
            continue
        if sample.response_logprobs is not None and len(sample.response_logprobs) != len(sample.response_token_ids):
            sample.response_logprobs = None
            skip("logprobs of wrong length (ignored)")
        samples.append(sample)
    if max_policy_lag is not None:
        fresh = _within_policy_lag(samples, max_policy_lag, policy_version, skip)
        if samples and not fresh:
            raise StaleDatasetError(f"{folder.path} holds no usable transition: every row is more than {max_policy_lag} policy versions old (skipped: {skipped})")
        samples = fresh
    if not samples:
        whose = f" of policy {policy!r}" if policy is not None else ""
        raise EmptyDatasetError(f"{folder.path} holds no usable transition{whose} (skipped: {skipped})")
    samples.sort(key=_content_order)
    return samples, skipped


def _content_order(sample: Sample) -> tuple:
    """Rows in an order that depends on what they hold only.

    The pipeline writes rows in whatever order DuckDB's threads finish, and episode ids are
    random, so neither file order nor ids are the same in two runs on the same data; the
    trainer's seeded minibatch order over this content order is, and so are its metrics.
    Rows equal in content are interchangeable.
    """
    return (sample.prompt_token_ids, sample.response_token_ids, sample.advantage, sample.policy_version or -1)


def _within_policy_lag(samples: list[Sample], max_lag: int, current: int | None, skip: Callable[[str], None]) -> list[Sample]:
    """The samples at most ``max_lag`` versions older than ``current`` (None: the newest among them)."""
    if current is None:
        current = max((s.policy_version for s in samples if s.policy_version is not None), default=None)
    kept = []
    for sample in samples:
        if sample.policy_version is None:
            skip("no policy version (lag unknown)")
        elif current - sample.policy_version > max_lag:
            skip(f"policy lag over {max_lag}")
        else:
            kept.append(sample)
    return kept


def _read_columns(path: Path) -> pa.Table:
    """The Sample columns of one file, after checking the file really has them as the schema says."""
    schema = pq.read_schema(path)
    for expected in SAMPLE_COLUMNS:
        if expected.name not in schema.names:
            raise DatasetError(f"{path} has no column {expected.name!r} of the dataset schema: rebuild the dataset with `pipeline build-dataset`")
        found = schema.field(expected.name).type
        if found != expected.type:
            raise DatasetError(f"{path}: column {expected.name!r} is {found}, the dataset schema says {expected.type}: rebuild the dataset with `pipeline build-dataset`")
    return pq.read_table(path, columns=SAMPLE_COLUMNS.names)
