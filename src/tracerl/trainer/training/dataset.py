"""The transitions dataset, read for training: a :class:`SampleColumns` of its usable rows.

``pipeline build-dataset`` writes a folder of ``transitions-*.parquet`` (rows of
``schemas.dataset.DATASET_SCHEMA``) and a ``.manifest.json`` that records, among the
build's inputs and counts, the schema version of those rows. The version is checked
before anything is read: a dataset of another version may hold columns of the same
name with another meaning, and training on it would go wrong without an error.

The columns read are the fields of :class:`Sample`, looked up in ``DATASET_SCHEMA`` at
import: a column renamed or retyped there fails here at once, not in the middle of a run.
Rows are filtered and sorted as Arrow columns, and the token ids handed to the trainer are the
list columns' own value buffers: no row becomes Python objects unless a caller asks for it.
"""

from __future__ import annotations

import os
from dataclasses import fields
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tracerl.schemas.dataset import DATASET_SCHEMA
from tracerl.schemas.dataset_folder import FILES_GLOB, MANIFEST_FILE, DatasetError, DatasetFolder
from tracerl.trainer.training.samples import Sample, SampleColumns, object_column, ragged_positions

__all__ = ["DatasetError", "EmptyDatasetError", "Sample", "SampleColumns", "StaleDatasetError", "read_dataset"]


class EmptyDatasetError(DatasetError):
    """The dataset holds no usable transition."""


class StaleDatasetError(EmptyDatasetError):
    """Every row was sampled by a policy too many versions old: nothing to train, and nothing wrong with the data."""


_NOT_COLUMNS = {"target_only"}
SAMPLE_COLUMNS = pa.schema([DATASET_SCHEMA.field(f.name) for f in fields(Sample) if f.name not in _NOT_COLUMNS])


def read_dataset(
    dataset_dir: str | os.PathLike, *, max_policy_lag: int | None = None, policy_version: int | None = None,
    policy: str | None = None,
) -> tuple[SampleColumns, dict[str, int]]:
    """The usable rows of the dataset folder, in content order; also how many rows were skipped, by reason.

    Rows with no response or a non-finite advantage are skipped; log-probs not as long as their
    response are dropped (the trainer's own stand in for them).

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
    if policy is not None:
        table = table.filter(pc.equal(table["policy_name"], policy))
    skipped: dict[str, int] = {}
    usable, wrong_logprobs = _usable_rows(table, skipped)
    if max_policy_lag is not None:
        stale = _beyond_policy_lag(table["policy_version"], usable, max_policy_lag, policy_version)
        _count(skipped, stale)
        fresh = usable & ~(stale["no policy version (lag unknown)"] | stale[f"policy lag over {max_policy_lag}"])
        if usable.any() and not fresh.any():
            raise StaleDatasetError(f"{folder.path} holds no usable transition: every row is more than {max_policy_lag} policy versions old (skipped: {skipped})")
        usable = fresh
    if not usable.any():
        whose = f" of policy {policy!r}" if policy is not None else ""
        raise EmptyDatasetError(f"{folder.path} holds no usable transition{whose} (skipped: {skipped})")
    table = table.filter(pa.array(usable))
    order = _content_order(table)
    try:
        return _sample_columns(table.take(order), with_logprobs=~wrong_logprobs[usable][order]), skipped
    except ValueError as exc:
        raise DatasetError(f"{folder.path}: {exc}: rebuild the dataset with `pipeline build-dataset`") from exc


def _usable_rows(table: pa.Table, skipped: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
    """Which rows can be trained on (a response, a finite advantage), and which of those have log-probs not as long as
    their response (to be dropped); the others are counted in ``skipped``."""
    response_lengths = pc.fill_null(pc.list_value_length(table["response_token_ids"]), 0).to_numpy()
    empty = response_lengths == 0
    bad_advantage = ~empty & ~pc.fill_null(pc.is_finite(table["advantage"]), False).to_numpy()
    usable = ~empty & ~bad_advantage
    logprob_lengths = pc.fill_null(pc.list_value_length(table["response_logprobs"]), -1).to_numpy()
    wrong_logprobs = usable & (logprob_lengths != -1) & (logprob_lengths != response_lengths)
    _count(skipped, {"empty response": empty, "non-finite advantage": bad_advantage, "logprobs of wrong length (ignored)": wrong_logprobs})
    return usable, wrong_logprobs


def _count(skipped: dict[str, int], reasons: dict[str, np.ndarray]) -> None:
    """Add each reason's count of rows (a row has at most one), in the order of each reason's first row: the order
    reading row by row would name them in."""
    found = sorted((int(rows.argmax()), reason, int(rows.sum())) for reason, rows in reasons.items() if rows.any())
    for _, reason, count in found:
        skipped[reason] = count


def _beyond_policy_lag(versions: pa.ChunkedArray, usable: np.ndarray, max_lag: int, current: int | None) -> dict[str, np.ndarray]:
    """The usable rows to skip for ``max_lag``, by reason: no version, or more than ``max_lag`` older than ``current``
    (None: the newest among the usable rows)."""
    known = pc.is_valid(versions).to_numpy()
    values = pc.fill_null(versions, 0).to_numpy()
    if current is None and (usable & known).any():
        current = int(values[usable & known].max())
    too_old = usable & known & (current - values > max_lag) if current is not None else np.zeros_like(usable)
    return {"no policy version (lag unknown)": usable & ~known, f"policy lag over {max_lag}": too_old}


def _content_order(table: pa.Table) -> np.ndarray:
    """Row indices in an order that depends on what the rows hold only: by prompt ids, response ids (each compared
    as a list: element by element, a prefix first), advantage and policy version (none first).

    The pipeline writes rows in whatever order DuckDB's threads finish, and episode ids are
    random, so neither file order nor ids are the same in two runs on the same data; the
    trainer's seeded minibatch order over this content order is, and so are its metrics.
    Rows equal in content are interchangeable; the sort is stable, so they keep file order.
    """
    keys = pa.table({
        "prompt": _ordered_bytes(table, "prompt_token_ids"),
        "response": _ordered_bytes(table, "response_token_ids"),
        "advantage": table["advantage"],
        "version": pc.fill_null(table["policy_version"], -1),
    })
    return pc.sort_indices(keys, sort_keys=[(name, "ascending") for name in keys.column_names]).to_numpy()


def _ordered_bytes(table: pa.Table, name: str) -> pa.LargeBinaryArray:
    """Each row's int32 ids as bytes that compare as the id lists do: big-endian, sign bit flipped.

    Arrow does not sort list columns; it sorts binary ones byte by byte, a prefix first.
    """
    values, offsets = _flat_values(table, name)
    ordered = (values.astype(np.int32, copy=False).view(np.uint32) ^ np.uint32(0x8000_0000)).astype(">u4")
    return pa.LargeBinaryArray.from_buffers(pa.large_binary(), len(offsets) - 1, [None, pa.py_buffer(offsets * 4), pa.py_buffer(ordered)])


def _sample_columns(table: pa.Table, with_logprobs: np.ndarray) -> SampleColumns:
    """The rows as :class:`SampleColumns`, their ids the list columns' buffers; log-probs only where ``with_logprobs``."""
    prompt_ids, prompt_offsets = _flat_values(table, "prompt_token_ids")
    response_ids, response_offsets = _flat_values(table, "response_token_ids")
    served, has_served = _aligned(table, "response_logprobs", response_offsets, with_logprobs, fill=0.0, dtype=np.float64)
    mask, has_mask = _aligned(table, "response_mask", response_offsets, np.ones(table.num_rows, dtype=bool), fill=1, dtype=np.int8)
    return SampleColumns(
        prompt_ids=prompt_ids, prompt_offsets=prompt_offsets, response_ids=response_ids, response_offsets=response_offsets,
        served_logprobs=served, has_served=has_served, response_mask=mask, has_mask=has_mask,
        advantage=table["advantage"].to_numpy(), policy_version=object_column(table["policy_version"].to_pylist()),
        policy_name=object_column(table["policy_name"].to_pylist()), target_only=np.zeros(table.num_rows, dtype=bool),
    )


def _flat_values(table: pa.Table, name: str) -> tuple[np.ndarray, np.ndarray]:
    """A list column's values, all rows one after another (the Arrow buffer itself, not a copy), and its offsets from 0."""
    array = table[name].combine_chunks()
    offsets = array.offsets.to_numpy().astype(np.int64)
    if array.values.null_count:
        raise ValueError(f"column {name!r} holds nulls inside its lists")
    values = array.values.to_numpy()[offsets[0] : offsets[-1]]
    return values, offsets - offsets[0]


def _aligned(table: pa.Table, name: str, response_offsets: np.ndarray, wanted: np.ndarray, *, fill: float, dtype: type) -> tuple[np.ndarray, np.ndarray]:
    """A per-response-token list column laid out as the response ids (``fill`` where a row has none, or is not
    ``wanted``), and which rows have it. A row whose list is not as long as its response is an error."""
    values, offsets = _flat_values(table, name)
    present = pc.is_valid(table[name]).to_numpy() & wanted
    response_lengths = np.diff(response_offsets)
    wrong = np.flatnonzero(present & (np.diff(offsets) != response_lengths))
    if len(wrong):
        i = wrong[0]
        raise ValueError(f"{len(wrong)} row(s) have a {name} not as long as their response ({offsets[i + 1] - offsets[i]} values for {response_lengths[i]} tokens)")
    out = np.full(int(response_offsets[-1]), fill, dtype=dtype)
    rows = np.flatnonzero(present)
    out[ragged_positions(response_offsets, rows)] = values[ragged_positions(offsets, rows)]
    return out, present


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
