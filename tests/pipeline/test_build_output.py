"""The dataset folder holds only the dataset: a glob over it reads transitions, whichever reader globs.

Also the watermark of incremental builds (the episodes already in the transitions).
"""

from __future__ import annotations

from pathlib import Path

import datasets
import duckdb
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from tracerl.pipeline import build_dataset, dataset_table
from tracerl.pipeline.build_output import MANIFEST, export_folder, transition_files
from tracerl.schemas import DATASET_SCHEMA
from tracerl_testing.span_builders import chat_episode, write_spans


def _read_by_every_reader(out: Path, cache: Path) -> dict[str, tuple[int, list[str]]]:
    """(rows, columns) of the folder as DuckDB's recursive glob, pyarrow's dataset discovery and
    Hugging Face datasets' data_dir read it."""
    duck = duckdb.sql(f"SELECT * FROM read_parquet('{out}/**/*.parquet', union_by_name = true)")
    arrow = ds.dataset(out).to_table()
    hf = datasets.load_dataset("parquet", data_dir=str(out), cache_dir=str(cache))["train"]
    return {
        "duckdb": (len(duck.fetchall()), duck.columns),
        "pyarrow": (arrow.num_rows, arrow.schema.names),
        "datasets": (hf.num_rows, hf.column_names),
    }


def test_what_each_reader_picks_up_in_a_folder(tmp_path):
    # the facts the layout rests on, measured rather than assumed
    folder = tmp_path / "probe"
    for name in ("visible.parquet", "_underscore.parquet", ".dot.parquet", ".hidden/inner.parquet"):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({"name": [name]}), folder / name)
    duck = {r[0] for r in duckdb.sql(f"SELECT name FROM read_parquet('{folder}/**/*.parquet')").fetchall()}
    assert duck == {"visible.parquet", "_underscore.parquet", ".dot.parquet", ".hidden/inner.parquet"}  # skips nothing
    assert ds.dataset(folder).to_table().column("name").to_pylist() == ["visible.parquet"]  # skips . and _
    hf = datasets.load_dataset("parquet", data_dir=str(folder), cache_dir=str(tmp_path / "cache"))["train"]
    assert sorted(hf["name"]) == ["_underscore.parquet", "visible.parquet"]  # skips . only
    (folder / "notes.json").write_text("{}")  # and both read any visible file as Parquet, whatever its name
    with pytest.raises(pa.ArrowInvalid, match="notes.json"):
        ds.dataset(folder)
    with pytest.raises(datasets.exceptions.DatasetGenerationError):
        datasets.load_dataset("parquet", data_dir=str(folder), cache_dir=str(tmp_path / "cache"))


def test_a_glob_over_the_dataset_reads_only_its_transitions(data_dir, tmp_path):
    out = tmp_path / "out"
    write_spans(data_dir, chat_episode("e1"))
    build_dataset(data_dir, out, incremental=True, exports=("openrlhf", "hf"))
    write_spans(data_dir, chat_episode("e2", reward=0.0))
    build_dataset(data_dir, out, incremental=True, exports=("openrlhf", "hf"))
    assert len(transition_files(out)) == 2 and (out / MANIFEST).is_file()
    assert export_folder(out, "hf").is_dir()  # exports exist, beside the dataset
    expected = (6, DATASET_SCHEMA.names)
    assert _read_by_every_reader(out, tmp_path / "cache") == {"duckdb": expected, "pyarrow": expected, "datasets": expected}


def test_incremental_runs_process_only_new_complete_episodes(data_dir, tmp_path):
    out = tmp_path / "out"
    write_spans(data_dir, chat_episode("e1"))
    # e2 is still running: its episode span has not been exported yet
    write_spans(data_dir, chat_episode("e2")[1:])
    first = build_dataset(data_dir, out, incremental=True)
    assert set(dataset_table(out).column("episode_id").to_pylist()) == {"e1"}
    assert first["counts"]["episodes"]["pending"] == 1
    write_spans(data_dir, [chat_episode("e2")[0]] + chat_episode("e3", reward=0.0))  # e2 ends, e3 runs
    second = build_dataset(data_dir, out, incremental=True)
    assert second["counts"]["episodes"]["already_processed"] == 1
    assert second["counts"]["llm_calls"]["skipped"] == {"already_processed": 3}
    assert second["watermark"]["episodes_processed"] == 3
    table = dataset_table(out)
    assert sorted(table.column("episode_id").to_pylist()) == ["e1"] * 3 + ["e2"] * 3 + ["e3"] * 3
    assert len(transition_files(out)) == 2
    third = build_dataset(data_dir, out, incremental=True)  # nothing new: nothing written
    assert third["counts"]["rows_written"] == 0 and len(transition_files(out)) == 2
    assert third["watermark"]["episodes_processed"] == 3

