"""Readers of the tables that tracerl's writers leave under a data dir, as a user's tools see them.

Only committed files count: writers give a file its ``*.parquet`` name when it is complete
and durable, and until then keep it under a dot-name, which every glob a user types (DuckDB,
pyarrow datasets) skips too. A test that reads through these sees what a user would.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq


def table_files(data_dir: str | os.PathLike, table: str = "spans") -> list[Path]:
    """The committed Parquet files of ``table`` (``DATA_DIR/<table>/**``), in name order."""
    return sorted(p for p in (Path(data_dir) / table).glob("**/*.parquet") if not p.name.startswith("."))


def read_table(data_dir: str | os.PathLike, table: str = "spans") -> pa.Table:
    """Every committed file of ``table`` as one Arrow table (no columns when there is none)."""
    files = table_files(data_dir, table)
    return pa.concat_tables(pq.read_table(f) for f in files) if files else pa.table({})


def span_rows(data_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """Rows of the ``spans`` table under ``data_dir``, in start order."""
    table = read_table(data_dir, "spans")
    return table.sort_by("start_time_unix_nano").to_pylist() if table.num_rows else []
