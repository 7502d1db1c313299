"""Fetch the token arrays and messages of the chosen calls and write the dataset files.

The light per-call table ``chosen`` (credit assigned) says, for every transition, which
file and row hold its span. It is streamed out of DuckDB ordered by that file, and span
files are visited once, in order, the next one read ahead while the current one is
assembled; each contributes the token arrays of its chosen rows (read with pyarrow,
which decodes Parquet lists far faster than DuckDB or any row-wise path, and writes
them 3x faster than DuckDB's COPY: measured on the 1M-span benchmark). An episode is
emitted as soon as the last file holding one of its calls has been read, so memory holds
only the episodes that straddle the current file. Rows come out ordered by (that file,
episode, step): the same input gives the same rows in the same order. They are written a
row group at a time into :class:`tracerl.core.storage.AtomicParquetFile` s, each
``OUT/transitions-*.parquet`` committed whole: what the build holds is bounded by a row
group and a span file, whatever the size of the input.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TypeVar

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tracerl.pipeline.layouts import CONTENT_LAYOUTS, TOKEN_LAYOUTS, ContentLayout, tokens_sql
from tracerl.pipeline.location import Location
from tracerl.pipeline.messages import messages_json
from tracerl.pipeline.response_chains import resolve_chains
from tracerl.pipeline.retokenize import Retokenizer
from tracerl.pipeline.source import SpanFiles
from tracerl.pipeline.trajectory import merge_trajectories
from tracerl.schemas import DATASET_SCHEMA
from tracerl.schemas import attributes as A
from tracerl.core.storage import AtomicParquetFile

Item = TypeVar("Item")
Done = TypeVar("Done")

FILE_ROWS = 131_072
ROW_GROUP_ROWS = 16_384  # ~50 MB of a typical transition's token arrays: what the write holds at a time
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


def _span_columns(location: Location, path: str, names: tuple[str, ...]) -> tuple[pa.Table, set[str]]:
    """The columns ``names`` of span file ``path``, all rows, and which of them the file has."""
    present = set(location.read_schema(path).names)
    return location.read_table(path, [c for c in names if c in present]), present


def _with_span_columns(meta: pa.Table, spans: pa.Table, present: set[str], names: tuple[str, ...]) -> pa.Table:
    """``meta`` (rows of one file, at ``file_row``) with the span columns ``names`` appended (NULL where the file lacks one)."""
    spans = spans.take(meta.column("file_row"))
    for name in names:
        column = spans.column(name) if name in present else pa.nulls(len(meta), _SPAN_TYPES[name])
        meta = meta.append_column(_RENAMED.get(name, name), column)
    return meta


def _ahead(work: Callable[[Item], Done], items: Iterable[Item]) -> Iterator[Done]:
    """``work(item)`` of each item in order, the next one done on a thread while the caller uses this one.

    For work that releases the GIL (pyarrow reading and taking rows): a span file is read
    and its rows taken while the caller extracts the previous file's messages.
    """
    with ThreadPoolExecutor(max_workers=1) as pool:
        ahead: Future | None = None
        for item in items:
            current, ahead = ahead, pool.submit(work, item)
            if current is not None:
                yield current.result()
        if ahead is not None:
            yield ahead.result()


def _with_content(con: duckdb.DuckDBPyConnection, part: pa.Table) -> pa.Table:
    """Rows with their span columns, tokens of other conventions filled in, and their messages."""
    part = _foreign_tokens(con, part)
    inputs, outputs = _messages(con, part)
    return part.append_column("input_messages", inputs).append_column("output_messages", outputs)


def call_messages(con: duckdb.DuckDBPyConnection, found: SpanFiles, calls: pa.Table) -> pa.Table:
    """``calls`` (rows of ``llm_calls``) with their ``input_messages`` and ``output_messages`` JSON.

    For readers of conversations rather than tokens (the judge): only the content columns are read,
    file by file; rows come back grouped by file.
    """
    parts = []
    file_index = calls.column("file_index").to_numpy()
    for current in np.unique(file_index):
        names = ("attributes", "events")
        spans, present = _span_columns(found.location, found.files[int(current)], names)
        part = _with_span_columns(calls.filter(pa.array(file_index == current)), spans, present, names)
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


@dataclass
class WriteTally:
    """What the write did beyond the rows it wrote: calls dropped, by reason, and rows whose ids were rebuilt."""

    skipped: Counter = field(default_factory=Counter)
    retokenized: int = 0
    retokenized_from_text: int = 0  # of them, responses the chat template could not render: their text encoded alone
    # Responses API calls made with previous_response_id: previous_resolved (input made whole),
    # previous_unresolved (written with their own input only: the earlier call is not in the episode's rows)
    chains: Counter = field(default_factory=Counter)


def _token_source(part: pa.Table, retokenizer: Retokenizer | None, tally: WriteTally) -> pa.Table:
    """``part`` with its ``token_source``; calls without token ids get them rebuilt when ``retokenizer`` is given."""
    if retokenizer is None:
        return part.append_column("token_source", pa.array([A.TOKEN_SOURCE_SERVED] * len(part), pa.string()))
    part, from_text = retokenizer.fill(part)
    tally.retokenized += pc.sum(pc.equal(part.column("token_source"), A.TOKEN_SOURCE_RETOKENIZED)).as_py() or 0
    tally.retokenized_from_text += from_text
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


_OUTPUT_ORDER = [("ready_at", "ascending"), ("episode_id", "ascending"), ("step", "ascending")]


def dataset_tables(
    con: duckdb.DuckDBPyConnection, found: SpanFiles, *, trajectory: bool, tally: WriteTally,
    retokenizer: Retokenizer | None = None,
) -> Iterator[pa.Table]:
    """Dataset tables of the ``chosen`` calls, one per span file that completes episodes.

    Calls dropped while writing, and rows whose token ids ``retokenizer`` rebuilt, are counted in ``tally``.
    """
    con.execute(
        "CREATE OR REPLACE TEMP TABLE writer_rows AS "
        "SELECT *, max(file_index) OVER (PARTITION BY episode_id) AS ready_at FROM chosen ORDER BY file_index"
    )
    files = [int(f) for (f,) in con.sql("SELECT DISTINCT file_index FROM writer_rows ORDER BY 1").fetchall()]

    def rows_of_each_file() -> Iterator[tuple[int, pa.Table]]:
        # a file's rows at a time: what is held is bounded by a span file, not by the input
        for current in files:
            yield current, con.sql(
                "SELECT * FROM writer_rows WHERE file_index = $file ORDER BY ready_at, episode_id, step",
                params={"file": current},
            ).to_arrow_table()

    def with_span_columns(rows: tuple[int, pa.Table]) -> tuple[int, pa.Table]:
        current, meta = rows
        spans, present = _span_columns(found.location, found.files[current], _SPAN_COLUMNS)
        return current, _with_span_columns(meta, spans, present, _SPAN_COLUMNS)

    pending: list[pa.Table] = []  # rows read already whose episode also has calls in a later file
    for current, part in _ahead(with_span_columns, rows_of_each_file()):
        part = _with_content(con, part)
        later = part.column("ready_at").to_numpy() > current
        if later.any():
            pending.append(part.filter(pa.array(later)))
            part = part.filter(pa.array(~later))
        if pending:
            waiting = pa.concat_tables(pending)
            now = waiting.column("ready_at").to_numpy() == current
            if now.any():
                pending = [waiting.filter(pa.array(~now))] if (~now).any() else []
                part = pa.concat_tables([waiting.filter(pa.array(now)), part]).sort_by(_OUTPUT_ORDER)
        if part.num_rows:  # whole episodes: a Responses chain's earlier turns are among their rows
            part = _token_source(resolve_chains(part, tally.skipped, tally.chains), retokenizer, tally)
        if part.num_rows:
            table = _to_dataset(part, tally.skipped)
            if trajectory:
                table = pa.Table.from_pylist(list(merge_trajectories(table.to_pylist())), schema=DATASET_SCHEMA)
            yield table
    con.execute("DROP TABLE writer_rows")


def _row_groups(tables: Iterable[pa.Table], rows: int) -> Iterator[pa.Table]:
    """The tables' rows regrouped into tables of ``rows`` rows (the last one smaller)."""
    held: list[pa.Table] = []
    size = 0
    for table in tables:
        held.append(table)
        size += table.num_rows
        while size >= rows:
            joined = pa.concat_tables(held)
            yield joined.slice(0, rows)
            held, size = [joined.slice(rows)], size - rows
    if size:
        yield pa.concat_tables(held)


def write_dataset(
    tables: Iterable[pa.Table], out: str, on_rows: Callable[[int], None] = lambda n: None
) -> tuple[list[str], int]:
    """Write the tables as ``out/transitions-*.parquet`` of up to ``FILE_ROWS`` rows; return paths and rows.

    Encoding and compressing a row group (pyarrow releases the GIL) overlaps with
    assembling the next; at most one row group is being written while the next is made.
    A failure discards the file being written (the caller removes the committed ones).
    """
    paths: list[str] = []
    total = in_file = 0
    file: AtomicParquetFile | None = None
    with ThreadPoolExecutor(max_workers=1) as pool:
        writing: Future | None = None

        def then(step: Callable[..., object], *args: object) -> None:
            """Run ``step`` on the writing thread once the step before it is over (its error raised here)."""
            nonlocal writing
            if writing is not None:
                writing.result()
            writing = pool.submit(step, *args)

        try:
            for group in _row_groups(tables, ROW_GROUP_ROWS):
                if file is None:
                    file, in_file = AtomicParquetFile(out, DATASET_SCHEMA, prefix="transitions", **_WRITE_OPTIONS), 0
                then(file.write, group)
                in_file += group.num_rows
                total += group.num_rows
                on_rows(group.num_rows)
                if in_file >= FILE_ROWS:
                    then(file.commit)
                    paths.append(file.path)
                    file = None
            if file is not None:
                then(file.commit)
                paths.append(file.path)
                file = None
            if writing is not None:
                writing.result()
        except BaseException:
            if writing is not None:
                writing.exception()  # the file is closed only once its last write is over
            if file is not None:
                file.discard()
            raise
    return paths, total
