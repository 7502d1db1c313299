"""The protocol-independent core: admission, conversion, durable submission.

The HTTP and gRPC front ends only decode transport details (headers, compression,
status codes) and call :meth:`Collector.export`; everything a client's data goes
through is here once.
"""

from __future__ import annotations

import hmac
import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

from google.protobuf.message import Message
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsPartialSuccess,
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTracePartialSuccess,
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from tracerl.collector import otlp, wal
from tracerl.collector.columns import CONVERTER, trace_table
from tracerl.collector.sink import DurableTable, Overloaded, TableKind
from tracerl.core.compaction_log import check_writer_prefix
from tracerl.core.storage import write_atomic
from tracerl.schemas.logs import logs_table
from tracerl.schemas.spans import SPANS_DICTIONARY_COLUMNS, spans_table

MiB = 1 << 20

log = logging.getLogger("tracerl.collector")


@dataclass(frozen=True)
class Signal:
    """One OTLP signal: the table it lands in and how its replies look."""

    table: TableKind
    respond: Callable[[int, str], Message]  # (rejected, message) -> response message


def _traces_response(rejected: int, message: str) -> Message:
    if not rejected:
        return ExportTraceServiceResponse()
    return ExportTraceServiceResponse(
        partial_success=ExportTracePartialSuccess(rejected_spans=rejected, error_message=message)
    )


def _logs_response(rejected: int, message: str) -> Message:
    if not rejected:
        return ExportLogsServiceResponse()
    return ExportLogsServiceResponse(
        partial_success=ExportLogsPartialSuccess(rejected_log_records=rejected, error_message=message)
    )


TRACES = Signal(
    TableKind("spans", ExportTraceServiceRequest, otlp.trace_rows, spans_table, columns=trace_table,
              dictionary_columns=SPANS_DICTIONARY_COLUMNS),
    _traces_response,
)
LOGS = Signal(TableKind("logs", ExportLogsServiceRequest, otlp.log_rows, logs_table), _logs_response)


@dataclass
class CollectorConfig:
    out: str  # data dir or object-store URI; tables go to OUT/spans, OUT/logs
    wal_dir: Path | None = None  # default: OUT/.collector-wal for a local OUT
    instance_id: str | None = None  # unique per collector; default: made once, kept in the WAL folder
    flush_bytes: int = 64 * MiB  # Arrow bytes per Parquet file (at most)
    flush_interval_s: float = 5.0  # and at least this often
    max_backlog_bytes: int = 512 * MiB  # not yet in Parquet -> 503 above this
    max_inflight_bytes: int = 256 * MiB  # request bodies being handled -> 429 above this
    max_body_bytes: int = 64 * MiB  # one request, after decompression -> 413 above this
    body_timeout_s: float = 30.0  # a client slower than this gets 408 and frees its memory
    auth_token: str | None = None

    def __post_init__(self) -> None:
        if self.instance_id is not None:  # refused at start, before a single span is acknowledged
            check_writer_prefix(self.instance_id)

    def resolved_wal_dir(self) -> Path:
        if self.wal_dir is not None:
            return Path(self.wal_dir)
        if "://" in self.out:
            raise ValueError(
                f"--out {self.out} is not a local folder: give a local --wal-dir for the write-ahead log"
            )
        return Path(self.out) / ".collector-wal"


class Admission:
    """Bounds the bytes of requests being handled at once (bounded memory under load)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._used = 0
        self._lock = threading.Lock()

    def acquire(self, nbytes: int) -> None:
        with self._lock:
            if self._used and self._used + nbytes > self.limit:
                raise Overloaded(
                    f"{self._used >> 20} MiB of requests in progress (limit {self.limit >> 20} MiB)", http_status=429
                )
            self._used += nbytes

    def release(self, nbytes: int) -> None:
        with self._lock:
            self._used -= nbytes


class Collector:
    """Owns the durable tables; ``export`` is the one entry point of both front ends.

    Worker ``i`` of a multi-process collector keeps its WAL in ``WAL_DIR/worker-i`` and
    has its own instance id there, so its Parquet files never collide with the others'.
    """

    def __init__(self, config: CollectorConfig, worker: int = 0) -> None:
        self.config = config
        wal_dir = worker_wal_dir(config, worker)
        self._lock_fd = wal.lock_folder(wal_dir)
        if config.instance_id:  # workers of one collector must still name their files apart
            self.instance_id = config.instance_id + (f"_w{worker}" if worker else "")
        else:
            self.instance_id = _instance_id(wal_dir)
        self.admission = Admission(config.max_inflight_bytes)
        # Conversion holds the GIL: threads converting at once only take turns, and each switch
        # costs (measured: ~20 % more spans per CPU-second with 2 than with uvicorn's 40 threads,
        # and with 1 than with 2: 24-25 vs 25-31 us of process CPU per span, far fewer GC runs).
        self._converting = threading.BoundedSemaphore(1)
        self.tables = {
            signal.table.name: DurableTable(
                signal.table,
                out=config.out,
                wal_dir=wal_dir / signal.table.name,
                instance_id=self.instance_id,
                flush_bytes=config.flush_bytes,
                flush_interval_s=config.flush_interval_s,
                max_backlog_bytes=config.max_backlog_bytes,
            )
            for signal in (TRACES, LOGS)
        }

    def start(self) -> None:
        log.info("OTLP trace requests are read by the %s", CONVERTER)
        for table in self.tables.values():
            table.start()

    def close(self) -> None:
        for table in self.tables.values():
            table.close()
        os.close(self._lock_fd)

    def flush(self) -> None:
        for table in self.tables.values():
            table.flush()

    def authorized(self, authorization: str | None) -> bool:
        """Whether an ``Authorization`` value (HTTP header or gRPC metadata) is ``Bearer <the
        configured token>``; always true without ``auth_token``. Compared in constant time."""
        token = self.config.auth_token
        if token is None:
            return True
        scheme, _, given = (authorization or "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode())

    def check_room(self, signal: Signal) -> None:
        """Raise :class:`Overloaded` now if ``signal``'s backlog is full: the front ends ask
        before reading a body, so a refused request costs neither its bytes nor its parse."""
        self.tables[signal.table.name].check_room()

    def export(self, signal: Signal, payload: bytes, as_json: bool = False) -> tuple[Future, Message]:
        """Parse, convert and submit one request body (OTLP protobuf, or OTLP/JSON).

        Returns a future that completes when the request is durable, and the response to
        send then. Raises :class:`Overloaded` when the client must retry later, and
        :class:`otlp.BadPayload` for a body that is not the signal's request.

        One request at a time is converted: a conversion takes several times its bytes, so
        requests waiting here hold only their bytes, which admission counts. A protobuf body
        is read straight into columns; protobuf parses it only where that reader cannot
        (:meth:`TableKind.build`).
        """
        self.check_room(signal)  # do not spend the conversion on a request submit would refuse
        with self._converting:
            request = None
            if as_json:
                request = otlp.parse_json(payload, signal.table.request)
                payload = request.SerializeToString()  # the WAL holds protobuf, whatever came in
            table, converted = signal.table.build(request, payload)
            del request
        response = signal.respond(converted.rejected, converted.message)
        if not table.num_rows:
            done: Future = Future()
            done.set_result(None)
            return done, response
        return self.tables[signal.table.name].submit(payload, table), response


def worker_wal_dir(config: CollectorConfig, worker: int) -> Path:
    return config.resolved_wal_dir() / f"worker-{worker}"


def replay_unused_wals(config: CollectorConfig, workers: int) -> None:
    """Commit what the WALs of workers no longer started (fewer ``--workers`` than last time) hold."""
    base = config.resolved_wal_dir()
    for folder in sorted(base.glob("worker-*")):
        index = folder.name.removeprefix("worker-")
        if index.isdigit() and int(index) >= workers and any(folder.glob("*/*.wal")):
            collector = Collector(config, int(index))
            collector.start()  # replays
            collector.close()


def _instance_id(wal_dir: Path) -> str:
    """A stable id per WAL folder: the same collector keeps its name across restarts."""
    path = wal_dir / "instance_id"
    if not path.exists():
        host = "".join(c if c.isalnum() else "_" for c in socket.gethostname())[:32]
        write_atomic(path, f"{host}_{uuid.uuid4().hex[:8]}")
    return path.read_text().strip()
