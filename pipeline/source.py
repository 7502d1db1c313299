"""Find and open the span (and late-reward) Parquet files of a data folder in DuckDB.

A folder full of immutable files written by several processes can hold files that are
not Parquet at all, truncated ones, or ones with another schema. Each is checked on its
own (its footer only, so this stays cheap) and set aside with the reason, so one bad
file never hides the rest of the data.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pyarrow.parquet as pq

from tracerl.pipeline.sql_text import empty_select, sql_list, sql_str
from tracerl.schemas import REWARDS_SCHEMA, SPANS_SCHEMA
from tracerl.schemas.rewards import REWARD_KEYS

# Without these a span cannot be placed in an episode or in time.
REQUIRED_SPAN_COLUMNS = ("trace_id", "span_id", "name", "start_time_unix_nano", "end_time_unix_nano")


class PipelineInputError(ValueError):
    """The input cannot be read at all (as opposed to parts of it being skipped)."""


@dataclass
class SpanFiles:
    """The readable span files of a folder and the ones set aside, with reasons."""

    root: Path
    files: list[str] = field(default_factory=list)
    rejected: list[dict[str, str]] = field(default_factory=list)
    reward_files: list[str] = field(default_factory=list)


def parquet_files(folder: Path) -> list[Path]:
    """Every ``*.parquet`` below ``folder``, sorted, skipping dot-files and dot-folders.

    Dot-names are files still being written (see ``tracerl.storage``) or tool metadata.
    """
    found = []
    for path in folder.rglob("*.parquet"):
        parts = path.relative_to(folder).parts
        if not any(part.startswith(".") for part in parts):
            found.append(path)
    return sorted(found)


def spans_folder(path: str | os.PathLike) -> tuple[Path, Path | None]:
    """The spans folder for a data dir (``D/spans``) or a spans folder, and ``D/rewards`` if any."""
    root = Path(path)
    if not root.exists():
        raise PipelineInputError(
            f"spans folder {root} does not exist: pass --spans a data dir (holding spans/) or a folder of span Parquet files"
        )
    if not root.is_dir():
        raise PipelineInputError(f"{root} is not a folder: pass --spans a data dir or a folder of span Parquet files")
    if (root / "spans").is_dir():
        rewards = root / "rewards"
        return root / "spans", rewards if rewards.is_dir() else None
    return root, None


def _check(path: Path, required: tuple[str, ...]) -> str | None:
    """Why ``path`` cannot be read as a table with ``required`` columns, or ``None``."""
    try:
        schema = pq.read_schema(path)
    except Exception as exc:  # pyarrow raises several types for corrupt files
        return f"not a readable Parquet file: {exc}"
    missing = [name for name in required if name not in schema.names]
    if missing:
        return f"missing column(s) {', '.join(missing)}"
    return None


def find_span_files(path: str | os.PathLike) -> SpanFiles:
    """Check every span file (and late-reward file of a data dir) below ``path``."""
    folder, rewards = spans_folder(path)
    result = SpanFiles(root=folder)
    for file in parquet_files(folder):
        reason = _check(file, REQUIRED_SPAN_COLUMNS)
        if reason:
            result.rejected.append({"file": str(file), "reason": reason})
        else:
            result.files.append(str(file))
    if rewards is not None:
        for file in parquet_files(rewards):
            reason = _check(file, ("value",))
            if reason:
                result.rejected.append({"file": str(file), "reason": reason})
            else:
                result.reward_files.append(str(file))
    return result


def register_raw_spans(con: duckdb.DuckDBPyConnection, files: list[str]) -> None:
    """View ``raw_spans``: all span files, columns unified by name to ``SPANS_SCHEMA``.

    Files written by older writers may lack newer promoted columns; they read as NULL.
    ``file_index`` (position in ``files``) and ``file_row`` locate each row, so the
    writer can later read the token arrays of exactly the rows it needs.
    """
    con.execute("CREATE OR REPLACE TEMP TABLE span_files (file_index INTEGER, filename VARCHAR)")
    if not files:
        con.execute(
            f"CREATE OR REPLACE VIEW raw_spans AS SELECT *, NULL::INTEGER AS file_index, NULL::BIGINT AS file_row "
            f"FROM ({empty_select(SPANS_SCHEMA)})"
        )
        return
    con.executemany("INSERT INTO span_files VALUES (?, ?)", list(enumerate(files)))
    present = set()
    for f in files:
        present.update(pq.read_schema(f).names)
    cols = ", ".join(
        f'"{fld.name}"' if fld.name in present else f'NULL AS "{fld.name}"' for fld in SPANS_SCHEMA
    )
    con.execute(
        f"CREATE OR REPLACE VIEW raw_spans AS SELECT {cols}, f.file_index, file_row_number AS file_row "
        f"FROM read_parquet({sql_list(files)}, union_by_name = true, filename = true, file_row_number = true) "
        f"JOIN span_files f USING (filename)"
    )


def register_late_rewards(con: duckdb.DuckDBPyConnection, files: list[str]) -> None:
    """View ``late_rewards`` over reward files (Parquet, CSV or JSONL) keyed by episode, trace, response or rollout id.

    A file may lack optional columns (they read as NULL); columns beyond ``REWARDS_SCHEMA`` are ignored.
    """
    parts = [empty_select(REWARDS_SCHEMA)]
    for f in files:
        parts.append(_reward_select(f))
    columns = ", ".join(f'"{field.name}"' for field in REWARDS_SCHEMA)
    con.execute(f"CREATE OR REPLACE VIEW late_rewards AS SELECT {columns} FROM ({' UNION ALL BY NAME '.join(parts)})")


def _reward_select(file: str) -> str:
    lower = file.lower()
    quoted = sql_str(file)
    if lower.endswith(".parquet"):
        reader = f"read_parquet({quoted})"
    elif lower.endswith(".csv"):
        reader = f"read_csv({quoted}, header = true)"
    elif lower.endswith((".jsonl", ".json", ".ndjson")):
        reader = f"read_json({quoted}, format = 'newline_delimited')"
    else:
        raise PipelineInputError(f"rewards file {file}: use .parquet, .csv or .jsonl")
    return f"SELECT * FROM {reader}"


def check_rewards_file(con: duckdb.DuckDBPyConnection, file: str) -> None:
    """Fail early, naming the file, when a ``--rewards`` file lacks a value or a key column."""
    if not Path(file).is_file():
        raise PipelineInputError(f"rewards file {file} does not exist")
    try:
        names = [d[0] for d in con.sql(_reward_select(file) + " LIMIT 0").description]
    except duckdb.Error as exc:
        raise PipelineInputError(f"rewards file {file} cannot be read: {exc}") from exc
    if "value" not in names:
        raise PipelineInputError(f"rewards file {file} has no 'value' column (columns: {', '.join(names)})")
    if not set(REWARD_KEYS) & set(names):
        raise PipelineInputError(
            f"rewards file {file} needs one key column: {', '.join(REWARD_KEYS)} (columns: {', '.join(names)})"
        )
