"""`tracerl collector compact`: closed hours' small files become few large ones, and no reader can tell.

Readers go through the pipeline's one listing (`Location.files`), which follows the compaction
records: every test counts what that listing reads, row by row and id by id.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from tracerl.cli import app
from tracerl.collector.compaction import CompactionBusy, CompactionSettings, compact, hour_closed
from tracerl.collector.sink import DurableTable
from tracerl.collector.service import TRACES
from tracerl.core.compaction_log import CompactionRecord, done_name, pending_name, record_name
from tracerl.pipeline import build_dataset, dataset_table
from tracerl.pipeline.location import locate
from tracerl.pipeline.source import raw_spans_of
from tracerl.core.storage import temporary_name, write_parquet_atomic
from tracerl_testing.synthetic_spans import generate

OLD = ("date=2026-11-26/hour=03", "date=2026-11-26/hour=04")
NOW = time.time()
NOW_PARTITION = time.strftime("date=%Y-%m-%d/hour=%H", time.gmtime(NOW))
SETTLED = CompactionSettings(target_bytes=64 << 20, settle_s=900, grace_s=0)


def small_files(root: str, table: pa.Table, partition: str, per_file: int, prefix: str = "spans") -> int:
    """Write ``table`` as files of ``per_file`` rows under ``root/partition``, as a writer flushing often would."""
    count = 0
    for start in range(0, table.num_rows, per_file):
        write_parquet_atomic(table.slice(start, per_file), root, prefix=prefix, partition=partition)
        count += 1
    return count


def read_ids(data: str) -> list[str]:
    """Every span id the pipeline's listing reads (duplicates kept), sorted."""
    spans = locate(data).child("spans")
    ids: list[str] = []
    for name in spans.files():
        ids.extend(spans.read_table(name, ["span_id"]).column("span_id").to_pylist())
    return sorted(ids)


def data_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*.parquet") if not p.name.startswith("."))


@pytest.fixture
def spans_in_hours(data_dir: Path) -> tuple[Path, list[str]]:
    """Three hours of spans in 10-row files: two closed hours and the current one."""
    table = generate(60, seed=1)  # 600 spans
    root = str(data_dir / "spans")
    thirds = [table.slice(0, 200), table.slice(200, 200), table.slice(400, 200)]
    for part, partition in zip(thirds, [*OLD, NOW_PARTITION]):
        small_files(root, part, partition, per_file=10)
    return data_dir, sorted(table.column("span_id").to_pylist())


def test_closed_hours_become_one_file_each_and_the_open_hour_is_left_alone(spans_in_hours):
    data, ids = spans_in_hours
    results = compact(str(data), SETTLED, now=NOW)

    assert sorted((r.partition, r.files_in, r.files_out, r.rows, r.inputs_deleted) for r in results) == [
        (OLD[0], 20, 1, 200, 20), (OLD[1], 20, 1, 200, 20)]
    for partition in OLD:
        assert [p.name[:8] for p in data_files(data / "spans" / partition)] == ["compact-"]
    assert len(data_files(data / "spans" / NOW_PARTITION)) == 20
    assert read_ids(str(data)) == ids
    assert compact(str(data), SETTLED, now=NOW) == []  # a second pass has nothing to do


def test_the_pipeline_builds_the_same_dataset_from_compacted_and_uncompacted_hours(spans_in_hours, tmp_path):
    data, _ = spans_in_hours
    build_dataset(data, tmp_path / "before")
    compact(str(data), SETTLED, now=NOW)
    build_dataset(data, tmp_path / "after")

    def rows(out: Path) -> pa.Table:
        return dataset_table(out).sort_by([("episode_id", "ascending"), ("step", "ascending")])

    before, after = rows(tmp_path / "before"), rows(tmp_path / "after")
    assert before.num_rows > 0
    # credit sums in DuckDB's thread order: the same values to the last bits or nearly
    computed = ["reward", "return", "advantage"]
    assert before.drop_columns(computed).equals(after.drop_columns(computed))
    for name in computed:
        assert np.allclose(before.column(name).to_numpy(), after.column(name).to_numpy(), rtol=0, atol=1e-9), name


def test_replaced_files_stay_through_the_grace_period_but_are_never_read_twice(spans_in_hours):
    data, ids = spans_in_hours
    graceful = CompactionSettings(target_bytes=64 << 20, settle_s=900, grace_s=600)
    first = compact(str(data), graceful, now=NOW)
    assert sum(r.inputs_deleted for r in first) == 0
    assert len(data_files(data / "spans" / OLD[0])) == 21  # inputs still there for readers that listed them
    assert read_ids(str(data)) == ids
    # a query outside a build reads them through the same listing; a glob of the folder reads the hour twice
    with raw_spans_of(data) as con:
        assert con.sql("SELECT count(*), count(DISTINCT span_id) FROM raw_spans").fetchall() == [(len(ids), len(ids))]
    assert duckdb.sql(f"SELECT count(*) FROM read_parquet('{data}/spans/**/*.parquet')").fetchall()[0][0] > len(ids)

    later = compact(str(data), graceful, now=NOW + 601)
    assert sum(r.inputs_deleted for r in later) == 40
    assert len(data_files(data / "spans" / OLD[0])) == 1
    assert sorted(p.name.rsplit(".", 1)[1] for p in (data / "spans" / OLD[0]).glob("_compaction-*")) == ["done", "json"]
    assert read_ids(str(data)) == ids


def test_a_reader_during_compaction_sees_the_old_files_or_the_new_never_both_never_neither(data_dir):
    table = generate(200, seed=2)  # 2000 spans over 10 hours of 20 files each
    root = str(data_dir / "spans")
    for hour in range(10):
        small_files(root, table.slice(hour * 200, 200), f"date=2026-11-26/hour={hour:02d}", per_file=10)
    ids = sorted(table.column("span_id").to_pylist())
    done = threading.Event()
    seen: list[int] = []
    errors: list[str] = []

    def reader() -> None:
        while not done.is_set():
            got = read_ids(str(data_dir))
            seen.append(len(got))
            if got != ids:
                errors.append(f"{len(got)} ids read, {len(set(got))} distinct, {len(ids)} expected")

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        compact(str(data_dir), CompactionSettings(target_bytes=64 << 20, settle_s=900, grace_s=300), now=NOW)
    finally:
        done.set()
        thread.join()
    assert len(seen) >= 2 and errors == []


def test_files_of_older_writers_with_fewer_columns_merge_with_nulls(data_dir):
    table = generate(4, seed=3)
    root = str(data_dir / "spans")
    write_parquet_atomic(table.slice(0, 20), root, prefix="old", partition=OLD[0])
    newer = table.slice(20).append_column("extra_column", pa.array(["x"] * (table.num_rows - 20)))
    write_parquet_atomic(newer, root, prefix="new", partition=OLD[0])

    compact(str(data_dir), SETTLED, now=NOW)

    [output] = data_files(data_dir / "spans" / OLD[0])
    merged = pq.read_table(output)
    assert merged.num_rows == table.num_rows
    assert merged.column("extra_column").null_count == 20


def test_an_unreadable_file_is_left_alone_and_named_while_the_rest_is_compacted(data_dir):
    root = str(data_dir / "spans")
    small_files(root, generate(4, seed=4), OLD[0], per_file=10)
    broken = data_dir / "spans" / OLD[0] / "agent-broken.parquet"
    broken.write_bytes(b"PAR1 not really")

    [result] = compact(str(data_dir), SETTLED, now=NOW)

    assert result.files_in == 4 and result.files_out == 1
    assert len(result.left_alone) == 1 and result.left_alone[0].startswith("agent-broken.parquet: not a readable Parquet file")
    assert broken.exists()


def test_a_writers_files_are_data_whatever_their_name(data_dir):
    """Only what a pending marker names is compaction's to delete: `compact-east-*` files (written by a
    collector of an older version, which took any instance id) are merged like any other, never cleaned."""
    table = generate(60, seed=11)
    root = str(data_dir / "spans")
    small_files(root, table.slice(0, 300), OLD[0], per_file=30, prefix="compact-east")
    small_files(root, table.slice(300), NOW_PARTITION, per_file=30, prefix="compact-east")  # the open hour

    result = CliRunner().invoke(app, ["collector", "compact", str(data_dir), "--settle", "0", "--grace", "0"])

    assert result.exit_code == 0, result.output
    assert "cleaned 0 left by killed passes" in result.output
    assert read_ids(str(data_dir)) == sorted(table.column("span_id").to_pylist())
    assert len(data_files(data_dir / "spans" / OLD[0])) == 1
    assert len(data_files(data_dir / "spans" / NOW_PARTITION)) == 10  # the open hour is not touched


@pytest.mark.parametrize("instance_id", ["compact-east", "_meta", ".hidden", "a/b"])
def test_serve_refuses_an_instance_id_that_readers_or_compaction_reserve(data_dir, instance_id):
    served = subprocess.run(
        [sys.executable, "-m", "tracerl", "collector", "serve", "--out", str(data_dir), "--http-port", "0",
         "--grpc-port", "-1", "--instance-id", instance_id], capture_output=True, text=True, timeout=60)
    assert served.returncode == 2
    assert f"instance id / file prefix {instance_id!r} is not allowed" in served.stderr
    assert not (data_dir / "spans").exists()


def test_hidden_files_are_neither_read_nor_merged(data_dir):
    table = generate(20, seed=12)
    root = str(data_dir / "spans")
    small_files(root, table, OLD[0], per_file=20)
    folder = data_dir / "spans" / OLD[0]
    first = data_files(folder)[0]
    backup = folder / f".backup-of-{first.name}"
    shutil.copy(first, backup)
    trash = data_dir / "spans" / ".trash" / OLD[1]
    trash.mkdir(parents=True)
    shutil.copy(first, trash / first.name)
    shutil.copy(first, trash / f"{first.name}-copy.parquet")

    compact(str(data_dir), SETTLED, now=NOW)

    assert read_ids(str(data_dir)) == sorted(table.column("span_id").to_pylist())
    assert backup.exists() and len(list(trash.iterdir())) == 2  # not data, and not compaction's



def test_the_temporary_files_of_a_killed_pass_are_cleaned_and_a_writer_s_are_not(data_dir):
    """Killed mid-write, a pass leaves ``storage.temporary_name`` files (and, before that scheme, files
    without its unique part): the next pass deletes those of its records and markers, and those of
    outputs its uncommitted pending markers name; a writer's own temporary is never compaction's."""
    table = generate(20, seed=16)
    small_files(str(data_dir / "spans"), table, OLD[0], per_file=20)
    folder = data_dir / "spans" / OLD[0]
    killed = "0123456789abcdef"
    (folder / pending_name(killed)).write_bytes(b"")
    theirs = [temporary_name(record_name(killed)), f".{done_name('fedcba9876543210')}.tmp",
              temporary_name(f"compact-{killed}-{time.time_ns():020d}-0a1b2c3d4e5f.parquet")]
    writers = [temporary_name(f"spans-{time.time_ns():020d}-0a1b2c3d4e5f.parquet")]
    for name in theirs + writers:
        (folder / name).write_bytes(b"half")

    (result,) = [r for r in compact(str(data_dir), SETTLED, now=NOW) if r.partition == OLD[0]]

    assert sorted(result.cleaned) == sorted([*theirs, pending_name(killed)])
    assert [name for name in theirs if (folder / name).exists()] == []
    assert all((folder / name).read_bytes() == b"half" for name in writers)
    assert read_ids(str(data_dir)) == sorted(table.column("span_id").to_pylist())


def _corrupt_data_pages(path: Path) -> None:
    """Overwrite bytes between the magic and the footer: the schema still reads, the rows do not."""
    data = bytearray(path.read_bytes())
    footer = int.from_bytes(data[-8:-4], "little") + 8
    for i in range(4, len(data) - footer):
        data[i] = 0xA5
    path.write_bytes(bytes(data))


def test_files_that_cannot_join_are_named_one_by_one_and_the_pass_goes_on(data_dir):
    """A non-span Parquet file, one with corrupt data pages, one whose column type conflicts: each is
    left where it is and named (only it: not the files that agree); every file that fits is merged,
    in its partition and in every later one."""
    table = generate(40, seed=13)
    root = str(data_dir / "spans")
    small_files(root, table.slice(0, 200), OLD[0], per_file=20)
    small_files(root, table.slice(200), OLD[1], per_file=20)
    folder = data_dir / "spans" / OLD[0]
    pq.write_table(pa.table({"answer": [42]}), folder / "notes.parquet")
    corrupt = folder / "spans-corrupt.parquet"
    pq.write_table(generate(2, seed=14), corrupt)
    _corrupt_data_pages(corrupt)
    odd = generate(2, seed=15)
    odd = odd.set_column(odd.schema.get_field_index("name"), "name", pa.array(range(odd.num_rows), pa.int64()))
    pq.write_table(odd, folder / "spans-odd.parquet")

    results = {r.partition: r for r in compact(str(data_dir), SETTLED, now=NOW)}

    first, second = results[OLD[0]], results[OLD[1]]
    assert first.failed is None and second.failed is None
    named = sorted(reason.split(":")[0] for reason in first.left_alone)
    assert named == ["notes.parquet", "spans-corrupt.parquet", "spans-odd.parquet"], first.left_alone
    assert (first.files_in, first.files_out, second.files_in, second.files_out) == (10, 1, 10, 1)
    assert all((folder / name).exists() for name in named)
    assert "lacks column(s)" in next(r for r in first.left_alone if r.startswith("notes"))
    assert "its rows cannot be read" in next(r for r in first.left_alone if r.startswith("spans-corrupt"))
    assert "name" in next(r for r in first.left_alone if r.startswith("spans-odd"))
    merged = [pq.read_table(path, columns=["span_id"]) for path in folder.glob("compact-*.parquet")]
    assert sorted(pa.concat_tables(merged).column("span_id").to_pylist()) == sorted(table.slice(0, 200).column("span_id").to_pylist())


def test_the_command_refuses_a_folder_that_is_not_a_data_dir(spans_in_hours, tmp_path):
    data, _ = spans_in_hours
    missing = CliRunner().invoke(app, ["collector", "compact", str(tmp_path / "nowhere")])
    assert missing.exit_code == 2 and "no such folder" in missing.output
    table = CliRunner().invoke(app, ["collector", "compact", str(data / "spans")])
    assert table.exit_code == 2 and f"is a table folder; pass the data dir above it ({data})" in table.output


def test_a_second_compactor_on_the_same_folder_is_refused(spans_in_hours):
    data, _ = spans_in_hours
    import fcntl

    with open(data / "spans" / ".compaction.lock", "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(CompactionBusy, match="another compaction is running"):
            compact(str(data), SETTLED, now=NOW)


def test_files_under_the_target_size_are_grouped_into_files_of_about_that_size(data_dir):
    table = generate(400, seed=5)
    root = str(data_dir / "spans")
    small_files(root, table, OLD[0], per_file=100)  # 40 files
    sizes = [p.stat().st_size for p in data_files(data_dir / "spans" / OLD[0])]
    target = sum(sizes) // 3 + 1

    [result] = compact(str(data_dir), CompactionSettings(target_bytes=target, settle_s=900, grace_s=0), now=NOW)

    # three full groups; a last file alone in its group is not worth rewriting and stays as it is
    assert result.files_in >= 39 and result.files_out == 3
    assert len(data_files(data_dir / "spans" / OLD[0])) == 3 + 40 - result.files_in
    assert all(p.stat().st_size <= target for p in data_files(data_dir / "spans" / OLD[0]))
    assert read_ids(str(data_dir)) == sorted(table.column("span_id").to_pylist())


def test_the_grace_period_counts_from_the_commit_not_from_the_start_of_the_pass(data_dir, monkeypatch):
    """A long pass must not shorten the time readers that listed before a swap keep the inputs."""
    from tracerl.collector import compaction

    small_files(str(data_dir / "spans"), generate(4, seed=16), OLD[0], per_file=10)
    monkeypatch.setattr(compaction, "_at_step", lambda step: time.sleep(1.5) if step == "output written" else None)

    compact(str(data_dir), SETTLED, now=NOW)

    [record] = [CompactionRecord.from_json(p.read_text()) for p in (data_dir / "spans").rglob("_compaction-*.json")]
    assert record.committed_at >= NOW + 1.5


def test_an_hour_is_closed_once_it_ended_plus_the_settle_time():
    start = 1764126000  # 2025-11-26 03:00 UTC
    assert not hour_closed("spans/date=2025-11-26/hour=03", start + 3600 + 899, 900)
    assert hour_closed("spans/date=2025-11-26/hour=03", start + 3600 + 900, 900)
    assert not hour_closed("spans/some-folder", start + 10**6, 0)  # only hour partitions are compacted


def _compaction_child(data: Path) -> list[str]:
    code = ("import sys; from tracerl.collector.compaction import CompactionSettings, compact; "
            "compact(sys.argv[1], CompactionSettings(target_bytes=1 << 20, settle_s=900, grace_s=0))")
    return [sys.executable, "-c", code, str(data)]


def test_kill_9_at_random_points_loses_and_duplicates_nothing(tmp_path):
    table = generate(300, seed=6)  # 3000 spans, 12 hours of 25 files
    template = tmp_path / "template"
    for hour in range(12):
        small_files(str(template / "spans"), table.slice(hour * 250, 250), f"date=2026-11-26/hour={hour:02d}", per_file=10)
    ids = sorted(table.column("span_id").to_pylist())

    whole = tmp_path / "whole"
    shutil.copytree(template, whole)
    started = time.monotonic()
    subprocess.run(_compaction_child(whole), check=True)
    duration = time.monotonic() - started
    assert len(data_files(whole / "spans")) == 12

    rng = random.Random(0)
    midway = 0  # kills that left some hours compacted and others not
    for attempt in range(8):
        data = tmp_path / f"killed-{attempt}"
        shutil.copytree(template, data)
        child = subprocess.Popen(_compaction_child(data))
        time.sleep(rng.uniform(0.2, duration))  # the interpreter's start is in it too
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        assert read_ids(str(data)) == ids, f"after kill -9 at attempt {attempt}"
        midway += 0 < len(list((data / "spans").rglob("_compaction-*.json"))) < 12
        subprocess.run(_compaction_child(data), check=True)  # the next pass finishes or undoes it
        assert read_ids(str(data)) == ids
        assert len(data_files(data / "spans")) == 12
        assert not [p for p in (data / "spans").rglob(".*.tmp")]
    assert midway >= 1  # the kills did land inside passes, not only before or after them


def test_a_wal_replay_finds_its_segment_written_even_after_compaction(data_dir, tmp_path):
    sink = DurableTable(TRACES.table, out=str(data_dir), wal_dir=tmp_path / "wal", instance_id="c1",
                        flush_bytes=1 << 20, flush_interval_s=1, max_backlog_bytes=1 << 20)
    root = str(data_dir / "spans")
    table = generate(2, seed=7)
    write_parquet_atomic(table.slice(0, 10), root, prefix=sink._prefix(41), partition=OLD[0])  # as _write does
    write_parquet_atomic(table.slice(10), root, prefix=sink._prefix(42), partition=OLD[0])
    assert sink._already_written(41, OLD[0]) and not sink._already_written(43, OLD[0])

    compact(str(data_dir), SETTLED, now=NOW)

    assert not list((data_dir / "spans" / OLD[0]).glob("c1-*"))
    assert sink._already_written(41, OLD[0]) and sink._already_written(42, OLD[0])
    assert not sink._already_written(43, OLD[0])


def test_compaction_on_object_storage(s3, tmp_path):
    store = f"s3://traces/data?endpoint_override={s3}&scheme=http"
    table = generate(20, seed=8)
    small_files(f"s3://traces/data/spans?endpoint_override={s3}&scheme=http", table, OLD[0], per_file=10)
    ids = sorted(table.column("span_id").to_pylist())
    build_dataset(store, tmp_path / "before")

    [result] = compact(store, CompactionSettings(target_bytes=64 << 20, settle_s=900, grace_s=300), now=NOW)
    assert (result.files_in, result.files_out, result.inputs_deleted) == (20, 1, 0)
    assert read_ids(store) == ids
    [later] = compact(store, CompactionSettings(target_bytes=64 << 20, settle_s=900, grace_s=300), now=NOW + 360)
    assert later.inputs_deleted == 20
    assert read_ids(store) == ids
    build_dataset(store, tmp_path / "after")
    assert dataset_table(tmp_path / "after").num_rows == dataset_table(tmp_path / "before").num_rows > 0


def test_the_command_compacts_and_says_what_it_did(spans_in_hours):
    data, ids = spans_in_hours
    result = CliRunner().invoke(app, ["collector", "compact", str(data), "--settle", "0", "--grace", "0"])
    assert result.exit_code == 0, result.output
    # the current hour is not over: it is left for a later pass
    assert "compacted 40 files into 2 (400 rows); deleted 40 replaced files" in result.output
    # and names them, partition by partition, for an operator to check
    merged = [line for line in result.output.splitlines() if "merged 20 files (200 rows) into compact-" in line]
    assert len(merged) == 2 and all(line.count("spans-") == 20 + 20 for line in merged)  # merged, then deleted (grace 0)
    assert read_ids(str(data)) == ids


def test_the_command_names_a_folder_another_compaction_holds(spans_in_hours):
    data, _ = spans_in_hours
    import fcntl

    with open(data / "spans" / ".compaction.lock", "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        result = CliRunner().invoke(app, ["collector", "compact", str(data)])
    assert result.exit_code == 2
    assert "another compaction is running on" in result.output


def test_serve_compacts_closed_hours_while_it_receives(spans_in_hours, tmp_path):
    data, ids = spans_in_hours
    server = subprocess.Popen(
        [sys.executable, "-m", "tracerl", "collector", "serve", "--out", str(data), "--http-port", "0",
         "--grpc-port", "-1", "--compact-every", "0.2"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(list((data / "spans").rglob("_compaction-*.json"))) < 2:
            time.sleep(0.2)
    finally:
        server.send_signal(signal.SIGINT)
        output = server.communicate(timeout=30)[0]
    records = [CompactionRecord.from_json(p.read_text()) for p in (data / "spans").rglob("_compaction-*.json")]
    assert sorted(r.rows for r in records) == [200, 200], output
    assert read_ids(str(data)) == ids
