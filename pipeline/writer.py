"""Fetch the token arrays and messages of the chosen calls and write the dataset files.

The light per-call table ``chosen`` (credit assigned) says, for every transition, which
file and row hold its span. Span files are visited once, in order; each contributes the
token arrays of its chosen rows (read with pyarrow, which decodes Parquet lists far
faster than any row-wise path). An episode is emitted as soon as the last file holding
one of its calls has been read, so memory holds only the episodes that straddle the
current file. Rows come out ordered by (that file, episode, step): the same input gives
the same rows in the same order. Files are written with
:func:`tracerl.storage.write_parquet_atomic` as ``OUT/transitions-*.parquet``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tracerl.pipeline.layouts import CONTENT_LAYOUTS, TOKEN_LAYOUTS, ContentLayout, tokens_sql
from tracerl.pipeline.location import Location
from tracerl.pipeline.messages import messages_json
from tracerl.pipeline.source import SpanFiles
from tracerl.pipeline.trajectory import merge_trajectories
from tracerl.schemas import DATASET_SCHEMA
from tracerl.storage import write_parquet_atomic

FILE_ROWS = 131_072
# token lists do not repeat: trying a dictionary for them costs time and space
_WRITE_OPTIONS = {"use_dictionary": ["episode_id", "task_id", "split", "agent_name", "trace_id"], "write_statistics": ["episode_id", "step"]}
_SPAN_COLUMNS = ("prompt_token_ids", "completion_token_ids", "completion_logprobs", "attributes", "events")
_RENAMED = {"completion_token_ids": "response_token_ids", "completion_logprobs": "response_logprobs"}
_SPAN_TYPES = {
    "prompt_token_ids": pa.list_(pa.int32()), "completion_token_ids": pa.list_(pa.int32()),
    "completion_logprobs": pa.list_(pa.float32()), "attributes": pa.string(), "events": pa.string(),
}


def _ones_like_lists(lists: pa.ListArray) -> pa.ListArray:
    """A list<int8> of ones with the same lengths as ``lists`` (the response mask)."""
    lengths = pc.list_value_length(lists).fill_null(0).to_numpy(zero_copy_only=False)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(np.ones(int(offsets[-1]), dtype=np.int8)))


def _messages(con: duckdb.DuckDBPyConnection, part: pa.Table) -> tuple[pa.Array, pa.Array]:
    """Input and output message JSON of each row, read as its content layout says.

    JSON layouts are read by DuckDB (the text is copied as is), from the span's attributes, its
    event's, or its log records' (``log_content``); flattened layouts are nested back into
    message lists by :func:`tracerl.pipeline.messages.messages_json`.
    """
    json_layouts = [layout for layout in CONTENT_LAYOUTS if not layout.flattened]

    def read(layout: ContentLayout, side: str) -> str:
        if layout.logs:
            return f"l.{side}_messages"
        source = "attributes"
        if layout.event:
            named = f"list_filter(json_extract(events, '$[*]'), lambda e: json_extract_string(e, '$.name') = '{layout.event}')"
            source = f"json_extract({named}[1], '$.attributes')"
        return f"json_extract_string({source}, '$.\"{getattr(layout, side)}\"')"

    def pick(side: str) -> str:
        whens = " ".join(f"WHEN '{layout.name}' THEN {read(layout, side)}" for layout in json_layouts)
        return f"CASE content_layout {whens} END"

    rows = part.select(["content_layout", "attributes", "events", "trace_id", "span_id"])
    con.register("writer_part", rows.append_column("position", pa.array(range(len(rows)), pa.int64())))
    try:
        found = con.sql(
            f"SELECT {pick('input')} AS i, {pick('output')} AS o FROM writer_part "
            "LEFT JOIN log_content l USING (trace_id, span_id) ORDER BY position"
        ).to_arrow_table()
    finally:
        con.unregister("writer_part")
    inputs, outputs = found.column("i"), found.column("o")
    layouts = part.column("content_layout").to_numpy(zero_copy_only=False)
    flattened = {layout.name: layout for layout in CONTENT_LAYOUTS if layout.flattened}
    rows = np.flatnonzero(np.isin(layouts, list(flattened)))
    if len(rows):
        ins, outs = inputs.to_pylist(), outputs.to_pylist()
        attributes = part.column("attributes")
        for i in rows.tolist():
            ins[i], outs[i] = messages_json(attributes[i].as_py(), flattened[layouts[i]])
        inputs, outputs = pa.array(ins, pa.string()), pa.array(outs, pa.string())
    return inputs, outputs


def _with_span_columns(location: Location, path: str, meta: pa.Table, names: tuple[str, ...]) -> pa.Table:
    """``meta`` (rows of file ``path``, at ``file_row``) with the span columns ``names`` appended (NULL where the file lacks one)."""
    present = set(location.read_schema(path).names)
    spans = location.read_table(path, [c for c in names if c in present]).take(meta.column("file_row"))
    for name in names:
        column = spans.column(name) if name in present else pa.nulls(len(meta), _SPAN_TYPES[name])
        meta = meta.append_column(_RENAMED.get(name, name), column)
    return meta


def _read_rows(con: duckdb.DuckDBPyConnection, location: Location, path: str, meta: pa.Table) -> pa.Table:
    """``meta`` rows joined with their span's token arrays and messages from file ``path`` of ``location``."""
    meta = _foreign_tokens(con, _with_span_columns(location, path, meta, _SPAN_COLUMNS))
    inputs, outputs = _messages(con, meta)
    return meta.append_column("input_messages", inputs).append_column("output_messages", outputs)


def call_messages(con: duckdb.DuckDBPyConnection, found: SpanFiles, calls: pa.Table) -> pa.Table:
    """``calls`` (rows of ``llm_calls``) with their ``input_messages`` and ``output_messages`` JSON.

    For readers of conversations rather than tokens (the judge): only the content columns are read,
    file by file; rows come back grouped by file.
    """
    parts = []
    file_index = calls.column("file_index").to_numpy()
    for current in np.unique(file_index):
        part = _with_span_columns(found.location, found.files[int(current)], calls.filter(pa.array(file_index == current)),
                                  ("attributes", "events"))
        inputs, outputs = _messages(con, part)
        parts.append(part.drop_columns(["attributes", "events"])
                     .append_column("input_messages", inputs).append_column("output_messages", outputs))
    if not parts:
        empty = pa.array([], pa.string())
        return calls.append_column("input_messages", empty).append_column("output_messages", empty)
    return pa.concat_tables(parts)


def _foreign_tokens(con: duckdb.DuckDBPyConnection, part: pa.Table) -> pa.Table:
    """Rows whose span has no tracerl token columns take them from another convention's attributes (TOKEN_LAYOUTS)."""
    if not TOKEN_LAYOUTS or not pc.any(pc.is_null(part.column("response_token_ids"))).as_py():
        return part
    columns = {"prompt_token_ids": "prompt", "response_token_ids": "completion", "response_logprobs": "logprobs"}
    select = ", ".join(f"{tokens_sql(kind, name)} AS {name}" for name, kind in columns.items())
    con.register("writer_tokens", part.select([*columns, "attributes"]))
    try:
        found = con.sql(f"SELECT {select} FROM writer_tokens").to_arrow_table()
    finally:
        con.unregister("writer_tokens")
    for name in columns:
        part = part.set_column(part.schema.get_field_index(name), name, found.column(name).cast(part.schema.field(name).type))
    return part


def _to_dataset(table: pa.Table, skipped: Counter) -> pa.Table:
    """Rows in dataset shape: response mask of ones, log-probs that do not match the response dropped.

    A call whose span has completion ids but no prompt ids cannot be trained on: it is
    dropped here and counted (the earlier stages test only the completion column).
    """
    no_prompt = table.column("prompt_token_ids").null_count
    if no_prompt:
        skipped["no_token_ids"] += no_prompt
        table = table.filter(pc.is_valid(table.column("prompt_token_ids")))
    logprobs = table.column("response_logprobs")
    # log-probs that do not match the response are unusable for importance ratios
    bad = pc.fill_null(
        pc.not_equal(pc.list_value_length(logprobs), pc.list_value_length(table.column("response_token_ids"))), False
    )
    if pc.any(bad).as_py():
        fixed = pc.if_else(bad, pa.nulls(len(table), logprobs.type), logprobs)
        table = table.set_column(table.schema.get_field_index("response_logprobs"), "response_logprobs", fixed)
    table = table.append_column("response_mask", _ones_like_lists(table.column("response_token_ids")))
    return table.select(DATASET_SCHEMA.names).cast(DATASET_SCHEMA)


def dataset_tables(
    con: duckdb.DuckDBPyConnection, found: SpanFiles, *, trajectory: bool, skipped: Counter
) -> Iterator[pa.Table]:
    """Dataset tables of the ``chosen`` calls, one per span file that completes episodes.

    Calls dropped while writing are counted in ``skipped`` by reason.
    """
    meta = con.sql(
        """SELECT * FROM (SELECT *, max(file_index) OVER (PARTITION BY episode_id) AS ready_at FROM chosen)
           ORDER BY ready_at, episode_id, step"""
    ).to_arrow_table()
    meta = meta.append_column("pos", pa.array(np.arange(meta.num_rows, dtype=np.int64)))
    file_index = meta.column("file_index").to_numpy()
    pending: list[pa.Table] = []  # rows read already whose episode also has calls in a later file
    for current in np.unique(file_index):
        # rows of this file, taken in output order (pos), so a file that completes all its
        # episodes needs no reordering
        part = _read_rows(con, found.location, found.files[int(current)], meta.filter(pa.array(file_index == current)))
        later = part.column("ready_at").to_numpy() > current
        if later.any():
            pending.append(part.filter(pa.array(later)))
            part = part.filter(pa.array(~later))
        if pending:
            waiting = pa.concat_tables(pending)
            now = waiting.column("ready_at").to_numpy() == current
            if now.any():
                pending = [waiting.filter(pa.array(~now))] if (~now).any() else []
                part = pa.concat_tables([waiting.filter(pa.array(now)), part])
                part = part.take(pc.sort_indices(part.column("pos")))
        if part.num_rows:
            table = _to_dataset(part, skipped)
            if trajectory:
                table = pa.Table.from_pylist(list(merge_trajectories(table.to_pylist())), schema=DATASET_SCHEMA)
            yield table


def write_dataset(
    tables: Iterator[pa.Table], out: str, on_rows: Callable[[int], None] = lambda n: None
) -> tuple[list[str], int]:
    """Write the tables as ``out/transitions-*.parquet`` of up to ``FILE_ROWS`` rows; return paths and rows.

    Compressing and writing a file (pyarrow releases the GIL) overlaps with reading the
    next span files; at most one file is being written while the next is assembled.
    """
    paths: list[str] = []
    buffered: list[pa.Table] = []
    size = total = 0
    with ThreadPoolExecutor(max_workers=1) as pool:
        writing: Future | None = None

        def flush() -> Future:
            if writing is not None:
                paths.append(writing.result())
            table = pa.concat_tables(buffered)
            return pool.submit(write_parquet_atomic, table, out, prefix="transitions", **_WRITE_OPTIONS)

        for table in tables:
            buffered.append(table)
            size += table.num_rows
            total += table.num_rows
            on_rows(table.num_rows)
            if size >= FILE_ROWS:
                writing = flush()
                buffered, size = [], 0
        if size:
            writing = flush()
        if writing is not None:
            paths.append(writing.result())
    return paths, total
