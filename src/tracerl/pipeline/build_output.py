"""The build's side of its output folder (:mod:`tracerl.schemas.dataset_folder` is the folder every
reader uses): what an earlier build left there (the episodes it processed: the watermark of
incremental builds; the files and exports a full build replaces), the manifest written whole,
where the exports go beside it.

::

    OUT/
      transitions-<time>-<id>.parquet   the dataset (DATASET_SCHEMA rows): the only Parquet files in OUT
      .manifest.json                    how it was built: inputs, options, counts, watermark, outputs
    OUT-openrlhf/, OUT-hf/              exports, when asked (--export): beside the dataset, not in it

A glob over the folder reads transitions and nothing else, whichever reader does it:
DuckDB's ``read_parquet('OUT/**/*.parquet')`` matches every ``*.parquet`` below OUT,
hidden folders included, so nothing else there may be Parquet (the exports hold Parquet:
they sit beside OUT); ``pyarrow.dataset.dataset(OUT)`` (and pandas, ``pq.read_table``)
reads every file not starting with ``.`` or ``_`` and ``datasets.load_dataset("parquet",
data_dir=OUT)`` every file not starting with ``.``, whatever its extension, so the
manifest is a dot-file. ``tests/pipeline/test_build_output.py`` checks all three.

The watermark of incremental builds is the dataset itself: an episode is processed once
its transitions are in ``transitions-*.parquet``, so there is no state to keep in step
with the files.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tracerl.core.storage import write_atomic
from tracerl.pipeline.sql_text import sql_list
from tracerl.schemas.dataset_folder import MANIFEST_FILE as MANIFEST
from tracerl.schemas.dataset_folder import DatasetFolder, transition_files

__all__ = ["MANIFEST", "clear_previous", "dataset_table", "episode_count", "export_folder", "read_manifest",
           "register_processed", "transition_files", "write_manifest"]


def read_manifest(out: str | os.PathLike) -> dict[str, Any]:
    """The manifest of the dataset in ``out`` (``FileNotFoundError`` naming it when the folder has none)."""
    return DatasetFolder(out).manifest()


def dataset_table(out: str | os.PathLike) -> pa.Table:
    """All transitions of a dataset folder in (episode, step) order (for tests and small tools)."""
    return DatasetFolder(out).table()


def export_folder(out: str | os.PathLike, kind: str) -> Path:
    """Where the ``kind`` export of the dataset in ``out`` goes: ``OUT-kind`` beside it."""
    folder = Path(out)
    return folder.parent / f"{folder.name}-{kind}"


def write_manifest(out: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    """Write the manifest whole or not at all; return it as a reader of the file sees it (tuples become lists)."""
    text = json.dumps(manifest, indent=2) + "\n"
    write_atomic(out / MANIFEST, text)
    return json.loads(text)


def episode_count(files: list[str] | list[Path]) -> int:
    """How many distinct episodes the transitions files hold (their episode_id column only)."""
    if not files:
        return 0
    ids = pa.chunked_array([pq.read_table(f, columns=["episode_id"]).column(0).combine_chunks() for f in files])
    return pc.count_distinct(ids).as_py()


def register_processed(con: duckdb.DuckDBPyConnection, out: Path | None, incremental: bool) -> int:
    """Table ``processed``: the episodes already in the dataset in ``out`` (none unless ``incremental``); their count."""
    files = transition_files(out) if incremental and out is not None else []
    source = f"read_parquet({sql_list(str(f) for f in files)})" if files else "(SELECT NULL::VARCHAR AS episode_id WHERE false)"
    con.execute(f"CREATE OR REPLACE TEMP TABLE processed AS SELECT DISTINCT episode_id FROM {source}")
    return con.execute("SELECT count(*) FROM processed").fetchall()[0][0]


def _previous_exports(out: Path) -> list[Path]:
    """The export folders the last build of ``out`` wrote, as its manifest lists them."""
    try:
        manifest = read_manifest(out)
    except (OSError, ValueError):
        return []
    return [out.parent / e["folder"] for e in manifest.get("outputs", {}).get("exports", {}).values()]


def clear_previous(out: Path, previous: set[Path]) -> None:
    """A full (non-incremental) build replaces the dataset it found in ``out``, once the new one is written:
    its transitions files and the exports made from them."""
    for old in previous:
        old.unlink()
    for folder in _previous_exports(out):
        if folder.is_dir():
            shutil.rmtree(folder)

