"""Rewrite the many small files of closed hour partitions into few large ones.

Every collector commits a file per flush (every 5 s by default) and every agent process with the
in-process Parquet exporter one per batch: a fleet writes millions of files a day, which object
stores bill per request and DuckDB plans per file. A pass over a table folder (``OUT/spans``,
``OUT/logs``) does, per hour partition:

- **Clean up** what a killed pass left: the outputs of a pass whose ``_compaction-<id>.pending``
  marker no ``_compaction-<id>.json`` record commits, and hidden temporary files of its own
  writes. Nothing else is ever deleted but a commit's inputs (next point): a writer's file is data
  whatever its name.
- **Finish** committed compactions whose grace period is over: delete their inputs, then mark
  them done (:mod:`tracerl.core.compaction_log` says why readers need the grace period).
- **Compact** a closed partition's small files (under half the target size) into files of about
  the target size, streaming a row group at a time, then commit them with one record. A file that
  cannot join (unreadable, a schema that does not merge, another table's file, rows that cannot be
  read) is left where it is and named; the rest of its partition, and every other, goes on.

**Closed.** Writers name the partition by the hour they write in (``hour_partition()`` at flush
time, the collector and the Parquet exporter alike), so an hour ended more than ``settle_s`` ago
(flush interval, clock skew) receives nothing more in normal operation. Nothing depends on it
for correctness: a file that lands later (a WAL replayed after an outage, an exporter's retried
batch) is a new file that a later pass compacts. Compaction never changes or drops a row: the
outputs' row count is checked against the inputs' before the commit.

**Kill -9 at any point** loses and duplicates nothing: before the record exists the outputs are
invisible and the next pass deletes them (its pending marker names them); after it, readers see only the outputs, and the next
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
from collections import Counter
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
    CompactionRecord,
    PartitionState,
    done_name,
    is_hidden,
    output_id,
    pending_name,
    partitions,
    read_record,
    record_name,
)
from tracerl.schemas.logs import LOGS_SCHEMA
from tracerl.schemas.spans import SPANS_SCHEMA
from tracerl.core.storage import AtomicParquetFile, resolve, write_atomic

log = logging.getLogger("tracerl.collector.compaction")

MiB = 1 << 20
TABLE_SCHEMAS = {"spans": SPANS_SCHEMA, "logs": LOGS_SCHEMA}
TABLES = tuple(TABLE_SCHEMAS)
_HOUR = re.compile(r"(?:^|/)date=(\d{4})-(\d{2})-(\d{2})/hour=(\d{2})$")
_ROW_GROUP_BYTES = 64 * MiB  # Arrow bytes buffered before a row group is written


def _at_step(step: str) -> None:
    """Called after each durable step of a pass (a file written, renamed or deleted).

    A no-op; fault tests replace it to kill the process at exactly that point
    (``tests/collector/test_compaction_faults.py``)."""


class CompactionBusy(RuntimeError):
    """Another compaction holds the folder's lock."""


@dataclass(frozen=True)
class CompactionSettings:
    target_bytes: int = 32 * MiB  # see src/tracerl/collector/README.md, Compaction: larger files cost the build memory
    settle_s: float = 15 * 60  # after its hour ends, a partition is closed
    grace_s: float = 15 * 60  # after a commit, readers that listed before may still read the inputs


@dataclass
class PartitionResult:
    """What one pass did to one partition, file by file (names relative to the partition)."""

    table: str
    partition: str
    merged: list[str] = field(default_factory=list)  # inputs of this pass's commits
    written: list[str] = field(default_factory=list)  # their outputs
    rows: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    deleted: list[str] = field(default_factory=list)  # inputs of commits whose grace period is over
    cleaned: list[str] = field(default_factory=list)  # what killed passes left: their outputs, markers, temporaries
    left_alone: list[str] = field(default_factory=list)  # files not compacted, with why
    failed: str | None = None  # why the partition's pass stopped (the other partitions went on)

    @property
    def files_in(self) -> int:
        return len(self.merged)

    @property
    def files_out(self) -> int:
        return len(self.written)

    @property
    def inputs_deleted(self) -> int:
        return len(self.deleted)

    def changed(self) -> bool:
        return bool(self.merged or self.deleted or self.cleaned or self.left_alone or self.failed)

    def describe(self) -> str:
        """One log line naming every file the pass touched or refused, for an operator to check."""
        parts = []
        if self.merged:
            parts.append(f"merged {self.files_in} files ({self.rows} rows) into {', '.join(self.written)}: "
                         f"{', '.join(self.merged)}")
        if self.deleted:
            parts.append(f"deleted {self.inputs_deleted} replaced files: {', '.join(self.deleted)}")
        if self.cleaned:
            parts.append(f"cleaned {len(self.cleaned)} left by killed passes: {', '.join(self.cleaned)}")
        if self.left_alone:
            parts.append(f"left alone {len(self.left_alone)}: {'; '.join(self.left_alone)}")
        if self.failed:
            parts.append(f"FAILED: {self.failed}")
        return f"{self.table}/{self.partition}: " + "; ".join(parts)


def compact(out: str, settings: CompactionSettings = CompactionSettings(), *, tables: tuple[str, ...] = TABLES,
            now: float | None = None, on_partition: Callable[[PartitionResult], None] | None = None) -> list[PartitionResult]:
    """One pass over ``OUT/<table>`` for each table that exists; returns what changed, partition by partition.

    A partition whose pass fails (storage errors) is reported with ``failed`` and the pass goes on
    with the others: one bad partition must not stop every later one from being compacted."""
    started = time.monotonic()
    start = time.time() if now is None else now

    def clock() -> float:  # ``now`` as the pass goes on: grace periods count from each commit, not the pass's start
        return start + (time.monotonic() - started)

    results = []
    for table in tables:
        fs, base = resolve(join_uri(out, table))
        if fs.get_file_info(base).type != pafs.FileType.Directory:
            continue
        with _lock(fs, base):
            for folder, state, sizes in _partitions(fs, base):
                result = PartitionResult(table, folder[len(base):].lstrip("/"))
                try:
                    _Partition(fs, folder, state, sizes, settings, result, clock).run()
                except Exception as exc:  # noqa: BLE001 - named in the result; the next partition goes on
                    result.failed = f"{type(exc).__name__}: {exc}"
                if result.changed():
                    results.append(result)
                    if on_partition:
                        on_partition(result)
    return results


def check_data_folder(out: str, tables: tuple[str, ...] = TABLES) -> None:
    """ValueError naming what to pass instead, for a data dir that does not exist or is a table folder.

    Both would otherwise make a pass that finds nothing and says it did nothing, which a cron job
    never reports. Checked by `collector compact`, not by every pass: `serve --compact-every`
    starts before its first flush has made the folder."""
    fs, base = resolve(out)
    if fs.get_file_info(base).type != pafs.FileType.Directory:
        raise ValueError(f"{out}: no such folder; pass the data dir a collector or exporter writes (it holds spans/, logs/)")
    if not any(fs.get_file_info(resolve(join_uri(out, t))[1]).type == pafs.FileType.Directory for t in tables):
        table_like = basename(base.rstrip("/")) in TABLES or any(
            info.base_name.startswith("date=") for info in fs.get_file_info(pafs.FileSelector(base)))
        if table_like:
            raise ValueError(f"{out} is a table folder; pass the data dir above it ({dirname(base.rstrip('/')) or '/'})")


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
    """Every hour partition below ``base`` from one listing, with its files' sizes (hidden files included).

    Partitions under a hidden folder (a ``.trash/`` copy) are not data, as for every reader."""
    infos = [i for i in fs.get_file_info(pafs.FileSelector(base, recursive=True)) if i.type == pafs.FileType.File]
    sizes: dict[str, dict[str, int]] = {}
    for info in infos:
        sizes.setdefault(dirname(info.path), {})[basename(info.path)] = info.size
    states = partitions(info.path for info in infos)
    for folder in sorted(sizes):
        if _HOUR.search(folder) and not is_hidden(folder[len(base):].lstrip("/")):
            yield folder, states.get(folder, PartitionState()), sizes[folder]


# storage.temporary_name() of an output (AtomicParquetFile) and of a record or marker (write_atomic);
# the unique part is optional: files of versions before it had none
_OUTPUT_TEMPORARY = re.compile(r"^\.compact-([0-9a-f]{16})-.*\.parquet(?:\.[0-9a-f]+)?\.tmp$")
_RECORD_TEMPORARY = re.compile(r"^\._compaction-([0-9a-f]{16})\.(?:json|done|pending)(?:\.[0-9a-f]+)?\.tmp$")


class _BadInput(Exception):
    """An input whose rows cannot be read: the bin is written again without it."""

    def __init__(self, name: str, cause: Exception) -> None:
        super().__init__(f"{name}: {type(cause).__name__}: {cause}")
        self.name, self.cause = name, cause


class _Partition:
    """One pass over one partition folder."""

    def __init__(self, fs: pafs.FileSystem, folder: str, state: PartitionState, sizes: dict[str, int],
                 settings: CompactionSettings, result: PartitionResult, clock: Callable[[], float]) -> None:
        self.fs, self.folder, self.state, self.sizes, self.settings, self.result = fs, folder, state, sizes, settings, result
        self.clock = clock
        self.table_schema = TABLE_SCHEMAS.get(result.table)
        self._records: dict[str, CompactionRecord] = {}

    def run(self) -> None:
        self.clean_up()
        self.finish()
        if hour_closed(self.folder, self.clock(), self.settings.settle_s):
            self.compact_small_files()
            self.finish()

    def path(self, name: str) -> str:
        return f"{self.folder}/{name}"

    def record(self, compaction_id: str) -> CompactionRecord:
        if compaction_id not in self._records:
            self._records[compaction_id] = read_record(self.fs, self.path(record_name(compaction_id)))
        return self._records[compaction_id]

    def clean_up(self) -> None:
        """Undo passes killed before their commit: exactly the files their pending markers name by id.

        A data file is compaction's only if its name carries the 16-hex id of a pending marker
        that no record commits; anything else is a writer's data, whatever it is called."""
        uncommitted = self.state.pending - self.state.committed
        for name in sorted(self.sizes):
            output_temporary = _OUTPUT_TEMPORARY.match(name)
            if (output_id(name) in uncommitted
                    or output_temporary and output_temporary.group(1) in uncommitted
                    or _RECORD_TEMPORARY.match(name)):  # no writer may start a name with an underscore
                self._delete_cleaned(name)
        for compaction_id in sorted(self.state.pending):
            self._delete_cleaned(pending_name(compaction_id))  # undone above, or superseded by its record
        self.state.pending.clear()

    def _delete_cleaned(self, name: str) -> None:
        if name not in self.sizes:
            return
        self.fs.delete_file(self.path(name))
        _at_step("cleaned")
        del self.sizes[name]
        self.state.parquet = [p for p in self.state.parquet if p != name]
        self.result.cleaned.append(name)

    def finish(self) -> None:
        """Delete the inputs of commits older than the grace period, then mark them done."""
        for compaction_id in sorted(self.state.committed - self.state.done):
            record = self.record(compaction_id)
            if self.clock() < record.committed_at + self.settings.grace_s:
                continue
            for name in record.inputs:
                if name in self.sizes:
                    self.fs.delete_file(self.path(name))
                    _at_step("input deleted")
                    del self.sizes[name]
                    self.result.deleted.append(name)
            self.state.parquet = [p for p in self.state.parquet if p not in record.inputs]
            write_atomic(self.path(done_name(compaction_id)), b"", filesystem=self.fs)
            _at_step("done")
            self.state.done.add(compaction_id)

    def compact_small_files(self) -> None:
        """Merge the small files that belong together; name every file left out, and why."""
        small = [name for name in self.state.visible(self.record)
                 if self.sizes.get(name, 0) < self.settings.target_bytes // 2]
        readable = []
        for name in small:
            try:
                readable.append((name, pq.read_schema(self.path(name), filesystem=self.fs)))
            except Exception as exc:  # pyarrow raises several types for a corrupt file
                self.result.left_alone.append(f"{name}: not a readable Parquet file ({exc})")
        schema, mergeable = self._common_schema(readable)
        for batch in _bins(mergeable, self.sizes, self.settings.target_bytes):
            while len(batch) >= 2:
                try:
                    self._compact(batch, schema)
                    break
                except _BadInput as bad:  # nothing committed: write the bin again without it
                    self.result.left_alone.append(f"{bad.name}: its rows cannot be read ({bad.cause})")
                    batch = [name for name in batch if name != bad.name]

    def _common_schema(self, files: list[tuple[str, pa.Schema]]) -> tuple[pa.Schema | None, list[str]]:
        """The schema the partition's files merge into, and the files that fit it.

        The table's own schema (spans, logs) comes first, then the most common schemas, so a file
        that conflicts is the one named, not the many that agree. A file that lacks a column the
        table declares non-nullable (a Parquet file of another table) cannot be filled with nulls:
        left alone."""
        merged = self.table_schema
        required = [f.name for f in merged if not f.nullable] if merged is not None else []
        counts = Counter(schema for _, schema in files)
        fits = []
        for name, schema in sorted(files, key=lambda item: (-counts[item[1]], item[0])):
            if missing := [column for column in required if column not in schema.names]:
                self.result.left_alone.append(f"{name}: lacks column(s) {', '.join(missing)} of the {self.result.table} "
                                              f"table (a file of another table?)")
                continue
            try:
                merged = schema if merged is None else pa.unify_schemas([merged, schema], promote_options="permissive")
            except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
                self.result.left_alone.append(f"{name}: its schema does not merge with the partition's ({exc})")
                continue
            fits.append(name)
        return merged, fits

    def _compact(self, names: list[str], schema: pa.Schema) -> None:
        compaction_id = uuid.uuid4().hex[:16]
        write_atomic(self.path(pending_name(compaction_id)), b"", filesystem=self.fs)  # from here the next pass may undo this one
        _at_step("pending")
        rows = expected = 0
        with AtomicParquetFile(self.folder, schema, prefix=f"{OUTPUT_PREFIX}{compaction_id}", filesystem=self.fs) as output:
            pending: list[pa.Table] = []
            pending_bytes = 0
            for name in names:
                try:
                    source = pq.ParquetFile(self.path(name), filesystem=self.fs)
                    expected += source.metadata.num_rows
                    groups = [_conform(source.read_row_group(group), schema) for group in range(source.num_row_groups)]
                except (pa.ArrowException, OSError, ValueError) as exc:
                    output.discard()
                    self._forget_pending(compaction_id)
                    raise _BadInput(name, exc) from exc
                for table in groups:
                    rows += table.num_rows
                    pending.append(table)
                    pending_bytes += table.nbytes
                    if pending_bytes >= _ROW_GROUP_BYTES:
                        output.write(pa.concat_tables(pending))
                        pending, pending_bytes = [], 0
            if pending:
                output.write(pa.concat_tables(pending))
            _at_step("output written")
        _at_step("output renamed")
        written = basename(output.path)
        got = pq.ParquetFile(output.path, filesystem=self.fs).metadata.num_rows
        if got != expected or rows != expected:  # never commit a rewrite that is not row for row the inputs
            self.fs.delete_file(output.path)
            self._forget_pending(compaction_id)
            raise RuntimeError(f"compaction of {self.folder}: wrote {got} rows for {expected}; nothing committed")
        size = self.fs.get_file_info(output.path).size
        record = CompactionRecord(compaction_id, names, [written], rows, committed_at=self.clock(),
                                  input_bytes=sum(self.sizes[n] for n in names), output_bytes=size)
        write_atomic(self.path(record_name(compaction_id)), record.to_json(), filesystem=self.fs)  # the commit
        _at_step("committed")
        self._forget_pending(compaction_id)
        _at_step("pending forgotten")
        self._records[compaction_id] = record
        self.state.committed.add(compaction_id)
        self.state.parquet.append(written)
        self.sizes[written] = size
        self.result.merged.extend(names)
        self.result.written.append(written)
        self.result.rows += rows
        self.result.bytes_in += record.input_bytes
        self.result.bytes_out += size

    def _forget_pending(self, compaction_id: str) -> None:
        self.fs.delete_file(self.path(pending_name(compaction_id)))


def _bins(files: list[str], sizes: dict[str, int], target: int) -> list[list[str]]:
    """Consecutive files (by name: by time) in groups of about ``target`` bytes."""
    groups: list[list[str]] = []
    total = target
    for name in sorted(files):
        if total + sizes[name] > target:
            groups.append([])
            total = 0
        groups[-1].append(name)
        total += sizes[name]
    return groups


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` with ``schema``'s columns in order: missing ones null (files of older writers), types promoted."""
    columns = [table.column(f.name).cast(f.type) if f.name in table.column_names else pa.nulls(table.num_rows, f.type)
               for f in schema]
    return pa.Table.from_arrays(columns, schema=schema)


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
                    (log.warning if result.failed or result.left_alone else log.info)("compaction: %s", result.describe())
            except Exception as exc:  # noqa: BLE001 - housekeeping: log and try again next time
                log.warning("compaction of %s failed (%s: %s); next try in %.0f s", self.out, type(exc).__name__, exc,
                            self.every_s)
