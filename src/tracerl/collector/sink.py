"""A durable table: WAL group commit in front, atomic Parquet files behind.

``submit`` hands over one request (its protobuf bytes for the WAL and its converted Arrow
rows) and returns a future that completes once the record is fsynced; only then does the
front end acknowledge. One writer thread owns the WAL (so appends, syncs and rotations
are ordered without locks); a flusher thread turns each sealed segment's rows into one
Parquet file and deletes the segment. Memory is bounded: when rows not yet committed to
Parquet exceed ``max_backlog_bytes`` (storage slower than clients, or unreachable),
``submit`` raises :class:`Overloaded` and clients are told to retry later.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
from google.protobuf.message import Message

from tracerl.collector import wal
from tracerl.collector.otlp import BadPayload, Converted, parse_protobuf
from tracerl.core.compaction_log import is_record, read_record
from tracerl.core.storage import hour_partition, resolve, write_parquet_atomic

log = logging.getLogger("tracerl.collector")

_STOP = object()


@dataclass
class _Record:
    payload: bytes
    table: pa.Table
    done: Future
    nbytes: int  # of the table's buffers, counted once (Table.nbytes walks the columns each time)


@dataclass
class _Rotate:
    done: Future


class Overloaded(Exception):
    """The collector cannot take more right now; the client should retry after a while."""

    def __init__(self, reason: str, retry_after_s: int = 1, http_status: int = 503) -> None:
        super().__init__(reason)
        self.retry_after_s = retry_after_s
        self.http_status = http_status  # 503: storage behind; 429: too much in flight


@dataclass(frozen=True)
class TableKind:
    """One table and the OTLP request whose records become its rows."""

    name: str  # folder under the data dir: "spans", "logs"
    request: type[Message]  # what a WAL record holds, protobuf-encoded
    rows: Callable[[Message], Converted]
    to_table: Callable[[list[dict[str, Any]]], pa.Table]
    # Optional fast path: the same table as ``table(rows(request))``, built column-wise,
    # from the request's protobuf bytes when given (see columns.py).
    columns: Callable[[Message, bytes | None], tuple[pa.Table, Converted]] | None = None
    # Columns worth dictionary-encoding in Parquet (None: pyarrow's default, all of them).
    dictionary_columns: tuple[str, ...] | None = None

    def build(self, request: Message | None, payload: bytes | None = None) -> tuple[pa.Table, Converted]:
        """Arrow table and per-item rejections of one request (on receipt and on WAL replay alike).

        ``payload``, if given, is the protobuf encoding of ``request`` (what the WAL stores), and
        ``request`` may be None: protobuf parses ``payload`` only when the column builder cannot
        read it or a value needs the row path (:class:`~tracerl.collector.otlp.BadPayload` if
        protobuf cannot parse it either)."""
        if self.columns is not None:
            try:
                return self.columns(request, payload)
            except BadPayload:
                raise
            except _UNSTORABLE:
                pass  # a value the schema cannot hold: the row path finds it and rejects it alone
        if request is None:
            request = parse_protobuf(payload, self.request)
        converted = self.rows(request)
        return self.table(converted), converted

    def convert(self, payload: bytes) -> Converted:
        """Rows of a WAL record: the same conversion as on receipt, so replay rejects alike."""
        return self.rows(parse_protobuf(payload, self.request))

    def table(self, converted: Converted) -> pa.Table:
        """Arrow table of the rows; a row the schema cannot hold (e.g. a uint64 time beyond
        int64) is rejected alone, so it never takes its request or a WAL replay down with it."""
        try:
            return self.to_table(converted.rows)
        except _UNSTORABLE:
            pass
        storable = []
        for index, row in enumerate(converted.rows):
            try:
                self.to_table([row])
                storable.append(row)
            except _UNSTORABLE as exc:
                what = f"span {row['span_id']}" if row.get("span_id") else f"item {index}"
                converted.reject(f"{what}: a value does not fit the {self.name} table ({type(exc).__name__}: {str(exc)[:80]})")
        converted.rows = storable
        return self.to_table(storable)


_UNSTORABLE = (pa.ArrowException, OverflowError, ValueError, TypeError)


def join_uri(base: str, name: str) -> str:
    """``base/name`` for a folder or URI, keeping a URI's ``?query`` (e.g. endpoint_override) last."""
    path, sep, query = base.partition("?")
    return f"{path.rstrip('/')}/{name}{sep}{query}"


class DurableTable:
    def __init__(
        self,
        kind: TableKind,
        *,
        out: str,
        wal_dir: Path,
        instance_id: str,
        flush_bytes: int,
        flush_interval_s: float,
        max_backlog_bytes: int,
    ) -> None:
        self.kind = kind
        self.root = join_uri(out, kind.name)
        self.wal_dir = wal_dir
        self.instance_id = instance_id
        # A commit starts by the time half the backlog is buffered: with a backlog smaller than
        # flush_bytes, waiting for flush_bytes (or the interval) would refuse clients with 503
        # while storage sits idle (measured: 16 MiB backlog, 64 MiB flush: 3k spans/s accepted).
        self.flush_bytes = min(flush_bytes, max(1, max_backlog_bytes // 2))
        self.flush_interval_s = flush_interval_s
        self.max_backlog_bytes = max_backlog_bytes
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._flush_queue: queue.SimpleQueue = queue.SimpleQueue()
        self._backlog_lock = threading.Lock()
        self._backlog_bytes = 0
        self._segment: wal.SegmentWriter | None = None
        self._buffer: list[pa.Table] = []
        self._buffer_bytes = 0
        self._oldest: float | None = None
        self._threads: list[threading.Thread] = []
        self._closing = threading.Event()
        self.committed_rows = 0  # rows in Parquet files written by this process

    # -- lifecycle --------------------------------------------------------------------

    def start(self) -> None:
        """Replay what a previous run left in the WAL, then start accepting."""
        self.wal_dir.mkdir(parents=True, exist_ok=True)
        seqs = wal.list_segments(self.wal_dir)
        for seq in seqs:
            self._replay(seq)
        self._segment = wal.SegmentWriter(self.wal_dir, (seqs[-1] + 1) if seqs else 1)
        self._threads = [
            threading.Thread(target=self._write_loop, name=f"wal-{self.kind.name}", daemon=True),
            threading.Thread(target=self._flush_loop, name=f"parquet-{self.kind.name}", daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def close(self) -> None:
        """Stop accepting, commit everything buffered to Parquet, leave an empty WAL."""
        if self._closing.is_set() or not self._threads:
            return
        self._closing.set()
        self._queue.put(_STOP)
        for thread in self._threads:
            thread.join()

    def flush(self) -> None:
        """Seal the current segment and wait until its rows are in Parquet (tests, shutdown)."""
        done: Future = Future()
        self._queue.put(_Rotate(done))
        done.result()

    # -- front-end API ----------------------------------------------------------------

    @property
    def backlog_bytes(self) -> int:
        return self._backlog_bytes

    def check_room(self, size: int = 0) -> None:
        """Raise :class:`Overloaded` unless ``size`` more bytes fit the backlog (any fit an empty one)."""
        if self._closing.is_set():
            raise Overloaded("collector is shutting down", retry_after_s=5)
        if self._backlog_bytes + size > self.max_backlog_bytes and self._backlog_bytes > 0:
            raise Overloaded(
                f"{self.kind.name}: {self._backlog_bytes >> 20} MiB not yet committed to storage "
                f"(limit {self.max_backlog_bytes >> 20} MiB)",
                retry_after_s=max(1, int(self.flush_interval_s)),
            )

    def submit(self, payload: bytes, table: pa.Table) -> Future:
        """Queue one request; the future completes when it is durable in the WAL."""
        size = table.get_total_buffer_size()
        with self._backlog_lock:
            self.check_room(size)
            self._backlog_bytes += size
        done: Future = Future()
        self._queue.put(_Record(payload, table, done, size))
        return done

    # -- writer thread: WAL append, group fsync, rotation ------------------------------

    def _write_loop(self) -> None:
        stopping = False
        while not stopping:
            timeout = None
            if self._oldest is not None:
                timeout = max(0.0, self._oldest + self.flush_interval_s - time.monotonic())
            try:
                items = [self._queue.get(timeout=timeout)]
            except queue.Empty:
                items = []
            while len(items) < 1024:  # group commit: everything that queued up meanwhile
                try:
                    items.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            records = [item for item in items if isinstance(item, _Record)]
            if records:
                self._commit(records)
            rotations = [item.done for item in items if isinstance(item, _Rotate)]
            stopping = any(item is _STOP for item in items)
            due = self._oldest is not None and time.monotonic() - self._oldest >= self.flush_interval_s
            if rotations or stopping or due or self._buffer_bytes >= self.flush_bytes:
                self._rotate(rotations)
        self._segment.discard()
        self._flush_queue.put(_STOP)

    def _commit(self, records: list[_Record]) -> None:
        try:
            self._segment.append(record.payload for record in records)
            self._segment.sync()
        except OSError as exc:  # disk full, I/O error: nothing of this group is acknowledged
            log.error("WAL write failed in %s: %s", self.wal_dir, exc)
            for record in records:
                self._release(record.nbytes)
                record.done.set_exception(Overloaded(f"write-ahead log unavailable: {exc.strerror}", 5))
            return
        if self._oldest is None:
            self._oldest = time.monotonic()
        for record in records:
            self._buffer.append(record.table)
            self._buffer_bytes += record.nbytes
            record.done.set_result(None)

    def _rotate(self, waiters: list[Future]) -> None:
        if self._segment.records:
            partition = hour_partition()
            self._segment.close(partition)
            self._flush_queue.put((self._segment.seq, partition, self._buffer, self._buffer_bytes, waiters))
            self._segment = wal.SegmentWriter(self.wal_dir, self._segment.seq + 1)
            self._buffer, self._buffer_bytes, self._oldest = [], 0, None
        else:  # nothing to write; still answer after earlier flushes are done
            self._flush_queue.put((None, None, [], 0, waiters))

    # -- flusher thread: Parquet commit, then segment deletion -------------------------

    def _flush_loop(self) -> None:
        while (job := self._flush_queue.get()) is not _STOP:
            seq, partition, tables, nbytes, waiters = job
            if seq is not None:
                if self._write(seq, partition, pa.concat_tables(tables)):
                    wal.segment_path(self.wal_dir, seq).unlink()
                self._release(nbytes)
            for done in waiters:
                done.set_result(None)

    def _write(self, seq: int, partition: str, table: pa.Table) -> bool:
        """Write one segment's rows, retrying while storage refuses (clients get 503 meanwhile).

        When shutting down, give up after a few tries: the sealed segment stays in the WAL and
        the next start commits it, so a storage outage cannot keep the process from exiting.
        """
        delay, attempts = 0.5, 0
        dictionary = True if self.kind.dictionary_columns is None else list(self.kind.dictionary_columns)
        while True:
            try:
                write_parquet_atomic(table, self.root, prefix=self._prefix(seq), partition=partition,
                                     use_dictionary=dictionary)
                self.committed_rows += table.num_rows
                return True
            except (OSError, pa.ArrowException) as exc:
                attempts += 1
                if self._closing.is_set() and attempts >= 3:
                    log.error("%s: storage %s still failing at shutdown (%s); %d rows stay in WAL segment %d "
                              "for the next start", self.kind.name, self.root, exc, table.num_rows, seq)
                    return False
                log.warning("writing %s rows to %s failed (%s); retrying in %.1fs", self.kind.name, self.root, exc, delay)
                self._closing.wait(delay)
                delay = min(delay * 2, 30.0)

    def _release(self, nbytes: int) -> None:
        with self._backlog_lock:
            self._backlog_bytes -= nbytes

    def _prefix(self, seq: int) -> str:
        # The segment number in the file name makes replay idempotent: see _replay.
        return f"{self.instance_id}-{seq:012d}"

    # -- replay ------------------------------------------------------------------------

    def _replay(self, seq: int) -> None:
        segment = wal.read_segment(self.wal_dir, seq)
        if segment.records:
            if segment.partition is None:  # seal it first, so a crash during replay stays idempotent
                segment.partition = hour_partition()
                wal.SegmentWriter(self.wal_dir, seq).close(segment.partition)
            if not self._already_written(seq, segment.partition):
                tables = [self.kind.build(None, record)[0] for record in segment.records]
                rows = sum(t.num_rows for t in tables)
                if rows:
                    self._write(seq, segment.partition, pa.concat_tables(tables))
                log.info("replayed %d %s records (%d rows) from WAL segment %d", len(segment.records), self.kind.name, rows, seq)
        segment.path.unlink()

    def _already_written(self, seq: int, partition: str) -> bool:
        """Did a crash hit between the Parquet commit and the segment's deletion?

        The file may since have been compacted into another: the partition's compaction
        records then name it among their inputs. Also removes the hidden temporary file of a
        write the crash interrupted."""
        fs, base = resolve(self.root)
        selector = pafs.FileSelector(f"{base}/{partition}", allow_not_found=True)
        prefix = self._prefix(seq) + "-"
        written = False
        records = []
        for info in fs.get_file_info(selector):
            if info.base_name.startswith(prefix):
                written = True
            elif info.base_name.startswith("." + prefix) and info.base_name.endswith(".tmp"):
                fs.delete_file(info.path)
            elif info.base_name.endswith(".json") and is_record(info.base_name):
                records.append(info.path)
        for path in records if not written else []:
            written = written or any(name.startswith(prefix) for name in read_record(fs, path).inputs)
        return written
