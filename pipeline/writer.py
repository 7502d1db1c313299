"""Fetch the token arrays and messages of the chosen calls and write the dataset files.

The light per-call table ``chosen`` (credit already assigned) is joined with the span files in
DuckDB and streamed out in record batches sorted by (episode, step), so memory holds
one batch of token arrays at a time, whatever the size of the input. Files are
written with :func:`tracerl.storage.write_parquet_atomic` as ``OUT/transitions-*.parquet``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tracerl.pipeline.messages import messages_json
from tracerl.pipeline.trajectory import merge_trajectories
from tracerl.schemas import DATASET_SCHEMA
from tracerl.schemas import attributes as A
from tracerl.storage import write_parquet_atomic

BATCH_ROWS = 32_768
FILE_ROWS = 131_072

_QUERY = f"""
SELECT t.episode_id, t.task_id, t.split, t.agent_name, t.step::INTEGER AS step,
       s.prompt_token_ids, s.completion_token_ids AS response_token_ids,
       s.completion_logprobs AS response_logprobs,
       t.reward, t."return", t.advantage, t.policy_version, t.trace_id, t.span_id, t.response_id,
       json_extract_string(s.attributes, '$."{A.GEN_AI_INPUT_MESSAGES}"') AS input_messages,
       json_extract_string(s.attributes, '$."{A.GEN_AI_OUTPUT_MESSAGES}"') AS output_messages,
       CASE WHEN t.content_layout = 'flattened' THEN s.attributes END AS flat_attributes
FROM chosen t JOIN raw_spans s ON s.trace_id = t.src_trace_id AND s.span_id = t.src_span_id
{{dedupe}}
ORDER BY t.episode_id, t.step
"""


def _ones_like_lists(lists: pa.ListArray) -> pa.ListArray:
    """A list<int8> of ones with the same lengths as ``lists`` (the response mask)."""
    lengths = pc.list_value_length(lists).fill_null(0).to_numpy(zero_copy_only=False)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(np.ones(int(offsets[-1]), dtype=np.int8)))


def _fill_flat_messages(batch: pa.RecordBatch) -> pa.RecordBatch:
    """Rebuild messages of calls recorded in a flattened layout (OpenLLMetry, OpenInference)."""
    flat = batch.column("flat_attributes")
    if flat.null_count == len(flat):
        return batch.drop_columns(["flat_attributes"])
    inputs = batch.column("input_messages").to_pylist()
    outputs = batch.column("output_messages").to_pylist()
    for i, attrs in enumerate(flat.to_pylist()):
        if attrs is not None:
            inputs[i], outputs[i] = messages_json(attrs)
    names = batch.schema.names
    batch = batch.set_column(names.index("input_messages"), "input_messages", pa.array(inputs, pa.string()))
    batch = batch.set_column(names.index("output_messages"), "output_messages", pa.array(outputs, pa.string()))
    return batch.drop_columns(["flat_attributes"])


def _to_dataset(batch: pa.RecordBatch) -> pa.Table:
    batch = _fill_flat_messages(batch)
    logprobs = batch.column("response_logprobs")
    # log-probs that do not match the response are unusable for importance ratios
    bad = pc.fill_null(
        pc.not_equal(pc.list_value_length(logprobs), pc.list_value_length(batch.column("response_token_ids"))), False
    )
    if pc.any(bad).as_py():
        logprobs = pc.if_else(bad, pa.nulls(len(batch), logprobs.type), logprobs)
        batch = batch.set_column(batch.schema.names.index("response_logprobs"), "response_logprobs", logprobs)
    table = pa.Table.from_batches([batch]).append_column(
        "response_mask", _ones_like_lists(batch.column("response_token_ids"))
    )
    return table.select(DATASET_SCHEMA.names).cast(DATASET_SCHEMA)


def dataset_tables(
    con: duckdb.DuckDBPyConnection, *, dedupe: bool, trajectory: bool
) -> Iterator[pa.Table]:
    """Dataset tables (about ``BATCH_ROWS`` rows each, in (episode, step) order) of the ``chosen`` calls."""
    dedupe_sql = (
        "QUALIFY row_number() OVER (PARTITION BY t.episode_id, t.step ORDER BY s.end_time_unix_nano DESC) = 1"
        if dedupe else ""
    )
    reader = con.sql(_QUERY.format(dedupe=dedupe_sql)).to_arrow_reader(BATCH_ROWS)
    if not trajectory:
        for batch in reader:
            yield _to_dataset(batch)
        return
    # merging never crosses an episode, so hold back the last episode of a batch until the next
    pending: list[dict] = []
    for batch in reader:
        rows = pending + _to_dataset(batch).to_pylist()
        if not rows:
            continue
        last = rows[-1]["episode_id"]
        cut = next(i for i, row in enumerate(rows) if row["episode_id"] == last)
        ready, pending = rows[:cut], rows[cut:]
        if ready:
            yield pa.Table.from_pylist(list(merge_trajectories(ready)), schema=DATASET_SCHEMA)
    if pending:
        yield pa.Table.from_pylist(list(merge_trajectories(pending)), schema=DATASET_SCHEMA)


def write_dataset(
    tables: Iterator[pa.Table], out: str, on_rows: Callable[[int], None] = lambda n: None
) -> tuple[list[str], int]:
    """Write the tables as ``out/transitions-*.parquet`` of up to ``FILE_ROWS`` rows; return paths and rows."""
    paths, buffered, total = [], [], 0
    size = 0
    for table in tables:
        buffered.append(table)
        size += table.num_rows
        total += table.num_rows
        on_rows(table.num_rows)
        if size >= FILE_ROWS:
            paths.append(write_parquet_atomic(pa.concat_tables(buffered), out, prefix="transitions"))
            buffered, size = [], 0
    if buffered and size:
        paths.append(write_parquet_atomic(pa.concat_tables(buffered), out, prefix="transitions"))
    return paths, total
