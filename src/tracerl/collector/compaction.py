"""Rewrite the many small files of closed hour partitions into few large ones.

Every collector commits a file per flush (every 5 s by default) and every agent process with the
in-process Parquet exporter one per batch: a fleet writes millions of files a day, which object
stores bill per request and DuckDB plans per file. A pass over a table folder (``OUT/spans``,
``OUT/logs``) does, per hour partition:

- **Clean up** what a killed pass left: outputs no record commits (``compact-<id>-*`` without
  ``_compaction-<id>.json``) and hidden temporary files of its own writes.
- **Finish** committed compactions whose grace period is over: delete their inputs, then mark
  them done (:mod:`tracerl.core.compaction_log` says why readers need the grace period).
- **Compact** a closed partition's small files (under half the target size) into files of about
  the target size, streaming a row group at a time, then commit them with one record.

**Closed.** Writers name the partition by the hour they write in (``hour_partition()`` at flush
time, the collector and the Parquet exporter alike), so an hour ended more than ``settle_s`` ago
(flush interval, clock skew) receives nothing more in normal operation. Nothing depends on it
for correctness: a file that lands later (a WAL replayed after an outage, an exporter's retried
batch) is a new file that a later pass compacts. Compaction never changes or drops a row: the
outputs' row count is checked against the inputs' before the commit.

**Kill -9 at any point** loses and duplicates nothing: before the record exists the outputs are
invisible and the next pass deletes them; after it, readers see only the outputs, and the next
pass finishes the deletion. One compactor per folder: on a local disk a lock file makes a second
one fail at once; on an object store (no lock primitive) run one.
"""

from __future__ import annotations

import calendar
import fcntl
import logging
import os
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from posixpath import basename, dirname

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from tracerl.collector.sink import join_uri
from tracerl.core.compaction_log import (
    OUTPUT_PREFIX,
    RECORD_PREFIX,
    CompactionRecord,
    PartitionState,
    done_name,
    output_id,
    partitions,
    read_record,
    record_name,
)
from tracerl.core.storage import AtomicParquetFile, fsync_dir, fsync_file, resolve

log = logging.getLogger("tracerl.collector.compaction")

MiB = 1 << 20
TABLES = ("spans", "logs")
_HOUR = re.compile(r"(?:^|/)date=(\d{4})-(\d{2})-(\d{2})/hour=(\d{2})$")
_ROW_GROUP_BYTES = 64 * MiB  # Arrow bytes buffered before a row group is written


class CompactionBusy(RuntimeError):
    """Another compaction holds the folder's lock."""


@dataclass(frozen=True)
class CompactionSettings:
    target_bytes: int = 32 * MiB  # see src/tracerl/collector/README.md, Compaction: larger files cost the build memory
    settle_s: float = 15 * 60  # after its hour ends, a partition is closed
    grace_s: float = 15 * 60  # after a commit, readers that listed before may still read the inputs


@dataclass
class PartitionResult:
    """What one pass did to one partition."""

    table: str
    partition: str
    files_in: int = 0
    files_out: int = 0
    rows: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    inputs_deleted: int = 0
    cleaned: int = 0
    left_alone: list[str] = field(default_factory=list)  # files not compacted, with why


def compact(out: str, settings: CompactionSettings = CompactionSettings(), *, tables: tuple[str, ...] = TABLES,
            now: float | None = None, on_partition: Callable[[PartitionResult], None] | None = None) -> list[PartitionResult]:
    """One pass over ``OUT/<table>`` for each table that exists; returns what changed, partition by partition."""
    now = time.time() if now is None else now
    results = []
    for table in tables:
        fs, base = resolve(join_uri(out, table))
        if fs.get_file_info(base).type != pafs.FileType.Directory:
            continue
        with _lock(fs, base):
            for folder, state, sizes in _partitions(fs, base):
                result = PartitionResult(table, folder[len(base):].lstrip("/"))
                _Partition(fs, folder, state, sizes, settings, result).run(now)
                if result.files_in or result.inputs_deleted or result.cleaned or result.left_alone:
                    results.append(result)
                    if on_partition:
                        on_partition(result)
    return results


def hour_closed(partition: str, now: float, settle_s: float) -> bool:
    """Did the hour of ``.../date=YYYY-MM-DD/hour=HH`` end more than ``settle_s`` before ``now``?"""
    match = _HOUR.search(partition)
    if not match:
        return False
    year, month, day, hour = (int(part) for part in match.groups())
    start = calendar.timegm((year, month, day, hour, 0, 0))  # partitions are named in UTC
    return now >= start + 3600 + settle_s


@contextmanager
def _lock(fs: pafs.FileSystem, base: str) -> Iterator[None]:
    if not isinstance(fs, pafs.LocalFileSystem):
        yield  # object stores: one compactor per folder, by deployment
        return
    with open(os.path.join(base, ".compaction.lock"), "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise CompactionBusy(f"another compaction is running on {base} (lock {handle.name})") from None
        yield


def _partitions(fs: pafs.FileSystem, base: str) -> Iterator[tuple[str, PartitionState, dict[str, int]]]:
    """Every hour partition below ``base`` from one listing, with its files' sizes (hidden files included)."""
    infos = [i for i in fs.get_file_info(pafs.FileSelector(base, recursive=True)) if i.type == pafs.FileType.File]
    sizes: dict[str, dict[str, int]] = {}
    for info in infos:
        sizes.setdefault(dirname(info.path), {})[basename(info.path)] = info.size
    states = partitions(info.path for info in infos)
    for folder in sorted(sizes):
        if _HOUR.search(folder):
            yield folder, states.get(folder, PartitionState()), sizes[folder]


class _Partition:
    """One pass over one partition folder."""

    def __init__(self, fs: pafs.FileSystem, folder: str, state: PartitionState, sizes: dict[str, int],
                 settings: CompactionSettings, result: PartitionResult) -> None:
        self.fs, self.folder, self.state, self.sizes, self.settings, self.result = fs, folder, state, sizes, settings, result
        self._records: dict[str, CompactionRecord] = {}

    def run(self, now: float) -> None:
        self.clean_up()
        self.finish(now)
        if hour_closed(self.folder, now, self.settings.settle_s):
            self.compact_small_files(now)
            self.finish(now)

    def path(self, name: str) -> str:
        return f"{self.folder}/{name}"

    def record(self, compaction_id: str) -> CompactionRecord:
        if compaction_id not in self._records:
            self._records[compaction_id] = read_record(self.fs, self.path(record_name(compaction_id)))
        return self._records[compaction_id]

    def clean_up(self) -> None:
        """Delete outputs of passes killed before their commit, and their hidden temporary files."""
        for name in list(self.sizes):
            orphan = name.startswith(OUTPUT_PREFIX) and output_id(name) not in self.state.committed
            temporary = name.endswith(".tmp") and name[1:].startswith((OUTPUT_PREFIX, RECORD_PREFIX))
            if orphan or temporary:
                self.fs.delete_file(self.path(name))
                del self.sizes[name]
                self.state.parquet = [p for p in self.state.parquet if p != name]
                self.result.cleaned += 1

    def finish(self, now: float) -> None:
        """Delete the inputs of commits older than the grace period, then mark them done."""
        for compaction_id in sorted(self.state.committed - self.state.done):
            record = self.record(compaction_id)
            if now < record.committed_at + self.settings.grace_s:
                continue
            for name in record.inputs:
                if name in self.sizes:
                    self.fs.delete_file(self.path(name))
                    del self.sizes[name]
                    self.result.inputs_deleted += 1
            self.state.parquet = [p for p in self.state.parquet if p not in record.inputs]
            _put(self.fs, self.path(done_name(compaction_id)), b"")
            self.state.done.add(compaction_id)

    def compact_small_files(self, now: float) -> None:
        small = [name for name in self.state.visible(self.record)
                 if self.sizes.get(name, 0) < self.settings.target_bytes // 2]
        readable = []
        for name in small:
            try:
                readable.append((name, pq.read_schema(self.path(name), filesystem=self.fs)))
            except Exception as exc:  # pyarrow raises several types for a corrupt file
                self.result.left_alone.append(f"{name}: not a readable Parquet file ({exc})")
        for batch in _bins(readable, self.sizes, self.settings.target_bytes):
            if len(batch) >= 2:
                self._compact(batch, now)

    def _compact(self, inputs: list[tuple[str, pa.Schema]], now: float) -> None:
        names = [name for name, _ in inputs]
        try:
            schema = pa.unify_schemas([schema for _, schema in inputs], promote_options="permissive")
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            self.result.left_alone.extend(f"{name}: its schema does not merge with the partition's ({exc})" for name in names)
            return
        compaction_id = uuid.uuid4().hex[:16]
        rows = expected = 0
        with AtomicParquetFile(self.folder, schema, prefix=f"{OUTPUT_PREFIX}{compaction_id}", filesystem=self.fs) as output:
            pending: list[pa.Table] = []
            pending_bytes = 0
            for name in names:
                source = pq.ParquetFile(self.path(name), filesystem=self.fs)
                expected += source.metadata.num_rows
                for group in range(source.num_row_groups):
                    table = _conform(source.read_row_group(group), schema)
                    rows += table.num_rows
                    pending.append(table)
                    pending_bytes += table.nbytes
                    if pending_bytes >= _ROW_GROUP_BYTES:
                        output.write(pa.concat_tables(pending))
                        pending, pending_bytes = [], 0
            if pending:
                output.write(pa.concat_tables(pending))
        written = basename(output.path)
        got = pq.ParquetFile(output.path, filesystem=self.fs).metadata.num_rows
        if got != expected or rows != expected:  # never commit a rewrite that is not row for row the inputs
            self.fs.delete_file(output.path)
            raise RuntimeError(f"compaction of {self.folder}: wrote {got} rows for {expected}; nothing committed")
        size = self.fs.get_file_info(output.path).size
        record = CompactionRecord(compaction_id, names, [written], rows, committed_at=now,
                                  input_bytes=sum(self.sizes[n] for n in names), output_bytes=size)
        _put(self.fs, self.path(record_name(compaction_id)), record.to_json().encode())  # the commit
        self._records[compaction_id] = record
        self.state.committed.add(compaction_id)
        self.state.parquet.append(written)
        self.sizes[written] = size
        self.result.files_in += len(names)
        self.result.files_out += 1
        self.result.rows += rows
        self.result.bytes_in += record.input_bytes
        self.result.bytes_out += size


def _bins(files: list[tuple[str, pa.Schema]], sizes: dict[str, int], target: int) -> list[list[tuple[str, pa.Schema]]]:
    """Consecutive files (by name: by time) in groups of about ``target`` bytes."""
    groups: list[list[tuple[str, pa.Schema]]] = []
    total = target
    for item in sorted(files, key=lambda item: item[0]):
        if total + sizes[item[0]] > target:
            groups.append([])
            total = 0
        groups[-1].append(item)
        total += sizes[item[0]]
    return groups


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` with ``schema``'s columns in order: missing ones null (files of older writers), types promoted."""
    columns = [table.column(f.name).cast(f.type) if f.name in table.column_names else pa.nulls(table.num_rows, f.type)
               for f in schema]
    return pa.Table.from_arrays(columns, schema=schema)


def _put(fs: pafs.FileSystem, path: str, data: bytes) -> None:
    """Write a small file whole: locally under a dot-name, fsynced, renamed; on object stores one put."""
    if isinstance(fs, pafs.LocalFileSystem):
        tmp = f"{dirname(path)}/.{basename(path)}.tmp"
        with open(tmp, "wb") as handle:
            handle.write(data)
        fsync_file(tmp)
        os.replace(tmp, path)
        fsync_dir(dirname(path))
        return
    with fs.open_output_stream(path) as stream:
        stream.write(data)


class PeriodicCompaction:
    """Passes every ``every_s`` seconds in a thread of ``collector serve`` (``--compact-every``).

    A failing pass (storage unreachable, a second compactor) is logged and tried again next
    time: compaction is housekeeping, never a reason to stop receiving."""

    def __init__(self, out: str, settings: CompactionSettings, every_s: float) -> None:
        self.out, self.settings, self.every_s = out, settings, every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="compaction", daemon=True)

    def __enter__(self) -> PeriodicCompaction:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                for result in compact(self.out, self.settings):
                    log.info("compacted %s/%s: %d files -> %d (%d rows), %d inputs deleted",
                             result.table, result.partition, result.files_in, result.files_out, result.rows,
                             result.inputs_deleted)
            except Exception as exc:  # noqa: BLE001 - housekeeping: log and try again next time
                log.warning("compaction of %s failed (%s: %s); next try in %.0f s", self.out, type(exc).__name__, exc,
                            self.every_s)
