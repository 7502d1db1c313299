"""Find and open the span (and late-reward) Parquet files of a data folder in DuckDB.

The folder is local or on object storage (:mod:`tracerl.pipeline.location`); it is
listed once per build and exactly that list is read. A folder full of immutable files
written by several processes can hold files that are not Parquet at all, truncated
ones, or ones with another schema. Each is checked on its own (its footer only, so this
stays cheap) and set aside with the reason, so one bad file never hides the rest of the
data.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.fs as pafs

from tracerl.pipeline.location import Location, locate
from tracerl.pipeline.sql_text import empty_select, sql_list, sql_str
from tracerl.schemas import REWARDS_SCHEMA, SPANS_SCHEMA
from tracerl.schemas.rewards import REWARD_KEYS

# Without these a span cannot be placed in an episode or in time.
REQUIRED_SPAN_COLUMNS = ("trace_id", "span_id", "name", "start_time_unix_nano", "end_time_unix_nano")


class PipelineInputError(ValueError):
    """The input cannot be read at all (as opposed to parts of it being skipped)."""


@dataclass
class SpanFiles:
    """The readable span files of a folder (by the names DuckDB reads them by) and the ones set aside, with reasons."""

    location: Location
    files: list[str] = field(default_factory=list)
    rejected: list[dict[str, str]] = field(default_factory=list)
    reward_files: list[str] = field(default_factory=list)
    log_files: list[str] = field(default_factory=list)  # the data dir's logs/: OTLP log records (message content)
    judgment_files: list[str] = field(default_factory=list)  # the data dir's judgments/: `pipeline judge`'s records
    columns: set[str] = field(default_factory=set)  # the span files' columns, all files together


def spans_folder(path: str | os.PathLike) -> tuple[Location, dict[str, Location]]:
    """The spans folder for a data dir (``D/spans``) or a spans folder, and those of ``D/rewards``, ``D/logs``
    and ``D/judgments`` that exist, by name."""
    try:
        root = locate(path)
    except ValueError as exc:
        raise PipelineInputError(str(exc)) from exc
    kind = root.kind()
    if kind == pafs.FileType.NotFound:
        raise PipelineInputError(
            f"spans folder {root} does not exist: pass --spans a data dir (holding spans/) or a folder of span Parquet files"
        )
    if kind != pafs.FileType.Directory:
        raise PipelineInputError(f"{root} is not a folder: pass --spans a data dir or a folder of span Parquet files")
    spans = root.child("spans")
    if spans.kind() == pafs.FileType.Directory:
        beside = {name: root.child(name) for name in ("rewards", "logs", "judgments")}
        return spans, {name: folder for name, folder in beside.items() if folder.kind() == pafs.FileType.Directory}
    return root, {}


def _check(location: Location, name: str, required: tuple[str, ...]) -> tuple[pa.Schema | None, str | None]:
    """The footer schema of file ``name``, or why it cannot be read as a table with ``required`` columns."""
    try:
        schema = location.read_schema(name)
    except Exception as exc:  # pyarrow raises several types for corrupt files
        return None, f"not a readable Parquet file: {exc}"
    missing = [column for column in required if column not in schema.names]
    if missing:
        return None, f"missing column(s) {', '.join(missing)}"
    return schema, None


def find_span_files(path: str | os.PathLike) -> SpanFiles:
    """Check every span file (and late-reward file of a data dir) below ``path``: one listing, then footers."""
    folder, beside = spans_folder(path)
    rewards, logs, judgments = (beside.get(name) for name in ("rewards", "logs", "judgments"))
    result = SpanFiles(location=folder)
    for file in folder.files():
        schema, reason = _check(folder, file, REQUIRED_SPAN_COLUMNS)
        if reason:
            result.rejected.append({"file": file, "reason": reason})
        else:
            result.files.append(file)
            result.columns.update(schema.names)
    if rewards is not None:
        for file in rewards.files():
            _, reason = _check(rewards, file, ("value",))
            if reason:
                result.rejected.append({"file": file, "reason": reason})
            else:
                result.reward_files.append(file)
    if logs is not None:
        for file in logs.files():
            _, reason = _check(logs, file, ("trace_id", "span_id", "event_name", "body", "attributes"))
            if reason:
                result.rejected.append({"file": file, "reason": reason})
            else:
                result.log_files.append(file)
    if judgments is not None:
        result.judgment_files = judgments.files(".jsonl")
    return result


def register_raw_spans(con: duckdb.DuckDBPyConnection, found: SpanFiles, keep: str = "true") -> None:
    """View ``raw_spans``: all span files, columns unified by name to ``SPANS_SCHEMA``.

    Files written by older writers may lack newer promoted columns; they read as NULL.
    ``file_index`` (position in ``files``) and ``file_row`` locate each row, so the
    writer can later read the token arrays of exactly the rows it needs. ``keep``: a condition on
    a span row (a bucket of a distributed build keeps its own traces, :mod:`tracerl.pipeline.buckets`).
    """
    files = found.files
    found.location.register(con)
    con.execute("CREATE OR REPLACE TEMP TABLE span_files (file_index INTEGER, filename VARCHAR)")
    if not files:
        con.execute(
            f"CREATE OR REPLACE VIEW raw_spans AS SELECT *, NULL::INTEGER AS file_index, NULL::BIGINT AS file_row "
            f"FROM ({empty_select(SPANS_SCHEMA)})"
        )
        return
    con.executemany("INSERT INTO span_files VALUES (?, ?)", list(enumerate(files)))
    cols = ", ".join(
        f'"{fld.name}"' if fld.name in found.columns else f'NULL AS "{fld.name}"' for fld in SPANS_SCHEMA
    )
    con.execute(
        f"CREATE OR REPLACE VIEW raw_spans AS SELECT {cols}, f.file_index, file_row_number AS file_row "
        f"FROM read_parquet({sql_list(files)}, union_by_name = true, filename = true, file_row_number = true) "
        f"JOIN span_files f USING (filename) WHERE {keep}"
    )


@contextmanager
def raw_spans_of(path: str | os.PathLike) -> Iterator[duckdb.DuckDBPyConnection]:
    """A connection whose view ``raw_spans`` holds a data dir's (or spans folder's) spans as the build reads them.

    The one way to query spans outside a build (a round's rewards, a recipe's held-out measure, a benchmark): the
    pipeline's one listing leaves out files still being written and a compaction's replaced or uncommitted files,
    sets unreadable ones aside, and gives every file ``SPANS_SCHEMA``'s columns. A glob of the folder
    (``read_parquet('spans/**/*.parquet')``) would read a compacted partition's spans twice during its grace period.
    """
    con = duckdb.connect()
    try:
        register_raw_spans(con, find_span_files(path))
        yield con
    finally:
        con.close()


def register_late_rewards(con: duckdb.DuckDBPyConnection, files: list[str], keep: str = "true") -> None:
    """View ``late_rewards`` over reward files (Parquet, CSV or JSONL) keyed by episode, trace, response or rollout id.

    A file may lack optional columns (they read as NULL); columns beyond ``REWARDS_SCHEMA`` are ignored.
    ``keep``: a condition on a reward row (a bucket keeps those of its own episodes).
    """
    parts = [empty_select(REWARDS_SCHEMA)]
    for f in files:
        parts.append(_reward_select(f))
    columns = ", ".join(f'"{field.name}"' for field in REWARDS_SCHEMA)
    con.execute(f"CREATE OR REPLACE VIEW late_rewards AS SELECT {columns} FROM ({' UNION ALL BY NAME '.join(parts)}) WHERE {keep}")


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


def check_rewards_file(con: duckdb.DuckDBPyConnection, file: str) -> str:
    """The name DuckDB reads a ``--rewards`` file (local or a URI) by; fails early, naming the file, when
    it lacks a value or a key column."""
    try:
        location = locate(file)
    except ValueError as exc:
        raise PipelineInputError(f"rewards file {exc}") from exc
    location.register(con)
    file = str(location)
    if location.kind() != pafs.FileType.File:
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
    return file


def counts(found: SpanFiles) -> dict[str, Any]:
    """The files a build read, left out, and found beside the spans."""
    return {"files": {"read": len(found.files), "rejected": len(found.rejected), "reward_files": len(found.reward_files),
                      "log_files": len(found.log_files)}}
