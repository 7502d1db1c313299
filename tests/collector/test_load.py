"""Under load: backpressure with Retry-After instead of growth, slow clients isolated, and
the retry behaviour of the official OpenTelemetry Collector's otlphttp exporter."""

from __future__ import annotations

import gzip
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult

from tracerl_testing.installed import require_module
from tracerl_testing.loadgen import encode_batches, flood, make_spans
from tracerl_testing.tables import read_table

PROTOBUF = {"content-type": "application/x-protobuf"}


def test_too_much_in_flight_gets_429_with_retry_after(start_collector):
    server = start_collector(max_inflight_bytes=1)
    server.collector.admission.acquire(1)  # as if a large request were being handled
    try:
        reply = httpx.post(f"{server.http_url()}/v1/traces", content=encode_batches(make_spans(2))[0], headers=PROTOBUF)
    finally:
        server.collector.admission.release(1)
    assert reply.status_code == 429
    assert int(reply.headers["retry-after"]) >= 1


def test_a_flood_is_refused_early_and_every_acknowledged_span_is_stored(start_collector, data_dir):
    """32 clients send large requests (token ids as plain int arrays) as fast as they are answered,
    half waiting Retry-After and half not, at a collector with 1 MiB in flight and 2 MiB of backlog:
    most get 429/503, nothing fails, and the spans in Parquet are exactly those of the requests
    acknowledged, each as often as it was acknowledged (benchmarks/collector_overload.py measures
    memory and goodput the same way)."""
    server = start_collector(max_inflight_bytes=1 << 20, max_backlog_bytes=2 << 20, flush_interval_s=0.2, grpc=False)
    spans = make_spans(256 * 8, packed=False, llm_every=2)
    bodies = encode_batches(spans, 256)
    ids = [[format(s.context.span_id, "016x") for s in spans[i * 256:(i + 1) * 256]] for i in range(len(bodies))]
    port = int(server.http_url().rsplit(":", 1)[1])
    tallies = []
    both = [threading.Thread(target=lambda honour=honour: tallies.append(flood(port, bodies, 16, 3.0, honour))) for honour in (True, False)]
    for t in both:
        t.start()
    for t in both:
        t.join()
    server.stop()
    replies = {status: sum(t.replies.get(status, 0) for t in tallies) for status in (200, 429, 503, -1)}
    assert replies[200] > 0 and replies[429] + replies[503] > replies[200] and replies[-1] == 0, replies
    acknowledged = sorted(span_id for t in tallies for body in t.acknowledged for span_id in ids[body])
    assert sorted(read_table(data_dir, "spans").column("span_id").to_pylist()) == acknowledged


def test_the_collector_process_never_loads_pandas(data_dir):
    """pyarrow imports pandas, when installed, on its first ``pa.array()`` only to ask whether the
    argument is a pandas object: 45 MiB of a collector worker's memory for a library it never uses.
    The collector's own process refuses the import (and still stores every span)."""
    require_module("pandas", "pip install pandas (datasets, in the [dev] extra, brings it)")  # installed, so pyarrow would load it
    proc = subprocess.Popen(
        [sys.executable, "-m", "tracerl", "collector", "serve", "--out", str(data_dir), "--http-port", "0",
         "--grpc-port", "-1", "--log-level", "warning"],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        url = re.search(r"OTLP/HTTP (\S+)", proc.stdout.readline()).group(1)
        spans = make_spans(64, packed=False)
        assert OTLPSpanExporter(endpoint=f"{url}/v1/traces").export(spans) is SpanExportResult.SUCCESS
        mapped = Path(f"/proc/{proc.pid}/maps").read_text()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    assert "/pandas/" not in mapped
    assert read_table(data_dir, "spans").num_rows == len(spans)


def _otelcol_otlphttp_export(url: str, body: bytes, attempts: list[int]) -> int:
    """What the OpenTelemetry Collector's ``otlphttp`` exporter does with ``compression: gzip``:
    protobuf body, gzip, its User-Agent; on 429/502/503/504 it waits Retry-After and retries."""
    headers = {
        "Content-Type": "application/x-protobuf",
        "Content-Encoding": "gzip",
        "User-Agent": "OpenTelemetry Collector Contrib/0.116.0 (linux/amd64)",
    }
    deadline = time.monotonic() + 60
    while True:
        reply = httpx.post(url, content=gzip.compress(body), headers=headers, timeout=10)
        attempts.append(reply.status_code)
        if reply.status_code not in (429, 502, 503, 504) or time.monotonic() > deadline:
            return reply.status_code
        time.sleep(float(reply.headers.get("retry-after", "1")))


def test_storage_outage_gives_503_then_otelcol_retries_succeed(start_collector, data_dir, tmp_path):
    data_dir.write_text("not a folder: every Parquet commit fails until this is fixed")
    server = start_collector(out=str(data_dir), wal_dir=tmp_path / "wal", max_backlog_bytes=1, flush_interval_s=0.1)
    url = f"{server.http_url()}/v1/traces"
    first, second = encode_batches(make_spans(40, seed=9), batch_size=20)

    assert httpx.post(url, content=first, headers=PROTOBUF).status_code == 200  # durable in the WAL
    reply = httpx.post(url, content=second, headers=PROTOBUF)
    assert reply.status_code == 503 and int(reply.headers["retry-after"]) >= 1
    assert server.collector.tables["spans"].backlog_bytes > 0  # bounded: the refused batch is not held

    attempts: list[int] = []
    exporter = threading.Thread(target=_otelcol_otlphttp_export, args=(url, second, attempts))
    exporter.start()
    time.sleep(1.5)
    data_dir.unlink()  # storage comes back; the flusher's retry commits the first batch
    exporter.join()
    assert attempts[0] == 503 and attempts[-1] == 200

    server.stop()
    table = read_table(data_dir)
    assert table.num_rows == 40 and len(set(table["span_id"].to_pylist())) == 40


def test_a_slow_client_does_not_stall_the_others(start_collector):
    server = start_collector(body_timeout_s=2.0)
    slow = socket.create_connection(("127.0.0.1", server.http_port))
    slow.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
                 b"Content-Length: 100000\r\n\r\n" + b"\x0a" * 10)
    try:
        exporter = OTLPSpanExporter(endpoint=f"{server.http_url()}/v1/traces")
        started = time.monotonic()
        for seed in range(5):
            assert exporter.export(make_spans(20, seed=seed)) is SpanExportResult.SUCCESS
        assert time.monotonic() - started < 2.0  # served while the slow body was still pending
        slow.settimeout(10)
        assert slow.recv(100).startswith(b"HTTP/1.1 408")  # then the slow one is cut off
    finally:
        slow.close()
