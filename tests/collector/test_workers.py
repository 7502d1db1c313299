"""`--workers N`: N processes share the ports, each with its own WAL and Parquet file names."""

from __future__ import annotations

import re
import signal
import subprocess
import sys

from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult

from tracerl_testing.loadgen import make_spans
from tracerl_testing.tables import read_table


def test_workers_share_ports_and_write_one_dataset(data_dir):
    proc = subprocess.Popen(
        [sys.executable, "-m", "tracerl", "collector", "serve", "--out", str(data_dir), "--http-port", "0",
         "--grpc-port", "0", "--workers", "2", "--instance-id", "edge", "--log-level", "warning"],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        line = proc.stdout.readline()
        http_url, grpc_port = re.search(r"OTLP/HTTP (\S+) OTLP/gRPC (\d+) workers=2", line).groups()
        sent = set()
        for seed in range(12):  # a new connection each time: the kernel spreads them over workers
            spans = make_spans(10, seed=seed)
            exporter = (OTLPSpanExporter(endpoint=f"{http_url}/v1/traces") if seed % 2
                        else GrpcExporter(endpoint=f"127.0.0.1:{grpc_port}", insecure=True))
            assert exporter.export(spans) is SpanExportResult.SUCCESS
            exporter.shutdown()
            sent |= {format(s.context.span_id, "016x") for s in spans}
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    table = read_table(data_dir)
    assert set(table["span_id"].to_pylist()) == sent and table.num_rows == len(sent)
    instances = {p.name.split("-")[0] for p in (data_dir / "spans").glob("**/*.parquet")}  # edge, edge_w1
    wal_dirs = sorted(p.name for p in (data_dir / ".collector-wal").iterdir() if p.is_dir())
    assert wal_dirs == ["worker-0", "worker-1"]
    assert instances == {"edge", "edge_w1"}, "both workers received spans and name their files apart"
