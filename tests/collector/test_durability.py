"""Durability: acknowledged means on disk; replay after a crash is exact; readers never see partial files."""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pyarrow.parquet as pq
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tracerl.collector import sink, wal
from tracerl.collector.service import TRACES, CollectorConfig, replay_unused_wals, worker_wal_dir
from tracerl.collector.server import CollectorServer, Endpoints
from tracerl.core.storage import write_parquet_atomic
from tracerl_testing.loadgen import encode_batches, make_spans
from tracerl_testing.tables import read_table


def test_torn_tail_is_cut_off_and_complete_records_survive(tmp_path):
    writer = wal.SegmentWriter(tmp_path, 7)
    writer.append([b"first", b"second"])
    writer.sync()
    with open(wal.segment_path(tmp_path, 7), "ab") as handle:  # a crash in the middle of a write
        handle.write(b"\x40\x00\x00\x00\x01\x02")
    segment = wal.read_segment(tmp_path, 7)
    assert segment.records == [b"first", b"second"] and segment.partition is None
    writer = wal.SegmentWriter(tmp_path, 7)  # appending after the cut is safe
    writer.append([b"third"])
    writer.close("date=2026-01-01/hour=00")
    segment = wal.read_segment(tmp_path, 7)
    assert segment.records == [b"first", b"second", b"third"]
    assert segment.partition == "date=2026-01-01/hour=00"


def _sealed_segment(wal_dir: Path, seq: int, payloads: list[bytes], partition: str) -> None:
    writer = wal.SegmentWriter(wal_dir, seq)
    writer.append(payloads)
    writer.close(partition)


@pytest.mark.parametrize("parquet_was_written", [True, False])
def test_replay_of_a_sealed_segment_is_exact(data_dir, parquet_was_written):
    """A crash between sealing a segment and deleting it: replay writes its rows once."""
    partition = "date=2026-01-01/hour=00"
    config = CollectorConfig(out=str(data_dir), instance_id="c1")
    payloads = encode_batches(make_spans(20, seed=5), batch_size=10)
    wal_dir = worker_wal_dir(config, 0) / "spans"
    wal_dir.mkdir(parents=True)
    _sealed_segment(wal_dir, 3, payloads, partition)
    if parquet_was_written:
        rows = [r for p in payloads for r in TRACES.table.convert(p).rows]
        write_parquet_atomic(TRACES.table.to_table(rows), data_dir / "spans", prefix="c1-000000000003", partition=partition)
    else:  # the crash interrupted the write: a hidden temporary file is left behind
        (data_dir / "spans" / partition).mkdir(parents=True)
        (data_dir / "spans" / partition / ".c1-000000000003-1-x.parquet.tmp").write_bytes(b"PAR1 half")

    server = CollectorServer(config, Endpoints(http_port=0, grpc_port=None)).start()
    server.stop()
    table = read_table(data_dir)
    assert table.num_rows == 20 and len(set(table["span_id"].to_pylist())) == 20
    assert all(f.parent.name == "hour=00" for f in (data_dir / "spans").glob("**/*.parquet"))
    assert not list(wal_dir.glob("*.wal"))
    assert not list((data_dir / "spans").glob("**/.*.tmp"))


def test_replay_of_an_unsealed_segment_seals_it_first(data_dir):
    """The segment that was open at the crash: replay writes it under the partition it seals it
    with, so a second crash in the middle of replay cannot write it twice."""
    config = CollectorConfig(out=str(data_dir), instance_id="c1")
    wal_dir = worker_wal_dir(config, 0) / "spans"
    wal_dir.mkdir(parents=True)
    writer = wal.SegmentWriter(wal_dir, 5)
    writer.append(encode_batches(make_spans(10, seed=6), batch_size=5))
    writer.sync()  # no commit record: the process died while this segment was open
    segment = wal.read_segment(wal_dir, 5)
    assert segment.partition is None

    CollectorServer(config, Endpoints(http_port=0, grpc_port=None)).start().stop()
    (written,) = (data_dir / "spans").glob("**/*.parquet")
    assert written.name.startswith("c1-000000000005-")
    assert read_table(data_dir).num_rows == 10


def test_a_second_collector_cannot_share_a_wal(data_dir):
    config = CollectorConfig(out=str(data_dir))
    with CollectorServer(config, Endpoints(http_port=0, grpc_port=None)):
        with pytest.raises(RuntimeError, match="in use by another collector"):
            CollectorServer(config, Endpoints(http_port=0, grpc_port=None))


# --- kill -9 -------------------------------------------------------------------------

def _start(out: Path) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tracerl", "collector", "serve", "--out", str(out), "--http-port", "0",
         "--grpc-port", "-1", "--flush-interval", "0.3", "--log-level", "warning"],
        stdout=subprocess.PIPE, text=True,
    )
    line = proc.stdout.readline()
    match = re.search(r"OTLP/HTTP (\S+)", line)
    assert match, f"collector did not start: {line!r}"
    return proc, match.group(1)


def _send_until_killed(url: str, bodies: list[bytes], acked: set[str], stop: threading.Event) -> None:
    with httpx.Client(timeout=10) as client:
        for body in bodies:
            if stop.is_set():
                return
            try:
                reply = client.post(url, content=body, headers={"content-type": "application/x-protobuf"})
            except httpx.HTTPError:
                return  # the server is gone; this request was never acknowledged
            if reply.status_code == 200:
                request = ExportTraceServiceRequest.FromString(body)
                acked.update(s.span_id.hex() for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans)


@pytest.mark.slow
def test_kill_9_loses_no_acknowledged_span(data_dir):
    rng = random.Random(7)
    acked: set[str] = set()
    only_in_wal = 0  # records acknowledged but not yet in Parquet when the process died
    wal_dir = data_dir / ".collector-wal" / "worker-0" / "spans"
    for round_ in range(3):
        proc, url = _start(data_dir)
        bodies = encode_batches(make_spans(3000, seed=100 + round_), batch_size=50)
        stop = threading.Event()
        clients = [
            threading.Thread(target=_send_until_killed, args=(f"{url}/v1/traces", bodies[i::3], acked, stop))
            for i in range(3)
        ]
        for client in clients:
            client.start()
        # kill mid-stream, after a random share of this round's 3,000 spans is acknowledged
        # (counted, not timed: a faster collector must still die with rows only in its WAL)
        kill_at, deadline = len(acked) + rng.randrange(900, 2400), time.monotonic() + 60
        while len(acked) < kill_at and time.monotonic() < deadline:
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        stop.set()
        for client in clients:
            client.join()
        # whatever a reader sees right after the crash is complete Parquet
        for path in (data_dir / "spans").glob("**/*.parquet"):
            if not path.name.startswith("."):
                pq.read_metadata(path)
        only_in_wal += sum(len(wal.read_segment(wal_dir, seq).records) for seq in wal.list_segments(wal_dir))

    proc, _ = _start(data_dir)  # replays the WAL of the last crash before serving
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0
    stored = read_table(data_dir)["span_id"].to_pylist()
    assert len(acked) > 500 and only_in_wal > 0
    assert acked <= set(stored), f"{len(acked - set(stored))} acknowledged spans lost"
    assert len(stored) == len(set(stored)), "replay duplicated spans"


def test_shutdown_during_a_storage_outage_leaves_the_rows_in_the_wal(data_dir, tmp_path):
    data_dir.write_text("not a folder: Parquet commits fail")
    config = CollectorConfig(out=str(data_dir), wal_dir=tmp_path / "wal", flush_interval_s=0.1)
    server = CollectorServer(config, Endpoints(http_port=0, grpc_port=None)).start()
    body = encode_batches(make_spans(20, seed=14))[0]
    assert httpx.post(f"{server.http_url()}/v1/traces", content=body,
                      headers={"content-type": "application/x-protobuf"}).status_code == 200
    started = time.monotonic()
    server.stop()  # gives up on storage instead of hanging; the WAL keeps the rows
    assert time.monotonic() - started < 10
    assert wal.list_segments(worker_wal_dir(config, 0) / "spans")

    data_dir.unlink()  # storage is back
    CollectorServer(config, Endpoints(http_port=0, grpc_port=None)).start().stop()
    assert read_table(data_dir).num_rows == 20


def test_a_crash_in_the_middle_of_replay_does_not_duplicate(data_dir, monkeypatch):
    config = CollectorConfig(out=str(data_dir), instance_id="c1")
    wal_dir = worker_wal_dir(config, 0) / "spans"
    wal_dir.mkdir(parents=True)
    writer = wal.SegmentWriter(wal_dir, 5)
    writer.append(encode_batches(make_spans(10, seed=6), batch_size=5))
    writer.sync()

    def write_then_die(*args, **kwargs):
        write_parquet_atomic(*args, **kwargs)
        raise SystemExit("killed after the Parquet commit, before the segment was deleted")

    monkeypatch.setattr(sink, "write_parquet_atomic", write_then_die)
    server = CollectorServer(config, Endpoints(http_port=0, grpc_port=None))
    with pytest.raises(SystemExit):
        server.start()
    os.close(server.collector._lock_fd)  # the dead process's lock goes with it
    monkeypatch.undo()

    CollectorServer(config, Endpoints(http_port=0, grpc_port=None)).start().stop()
    table = read_table(data_dir)
    assert table.num_rows == 10 and len(set(table["span_id"].to_pylist())) == 10


def test_wal_of_a_worker_no_longer_started_is_committed(data_dir):
    """Last run had --workers 2, this one has 1: worker 1's acknowledged rows are not stranded."""
    config = CollectorConfig(out=str(data_dir))
    wal_dir = worker_wal_dir(config, 1) / "spans"
    wal_dir.mkdir(parents=True)
    writer = wal.SegmentWriter(wal_dir, 1)
    writer.append(encode_batches(make_spans(7, seed=8)))
    writer.sync()
    replay_unused_wals(config, workers=1)
    assert read_table(data_dir).num_rows == 7
    assert not wal.list_segments(wal_dir)
