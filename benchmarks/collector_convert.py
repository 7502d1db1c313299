"""Collector conversion: OTLP request -> spans Arrow table, row path vs column paths.

The CPU the collector spends per span outside HTTP, WAL and Parquet, side by side on the
same pre-encoded requests (batches of 512 agent-like spans from the real OTel SDK):

* rows: ``spans_table(trace_rows(request).rows)``, one ``span_row`` dict per span (the
  reference, and the collector's path before the column builder);
* columns (Python): ``trace_table(request)``, values read from the protobuf objects
  (the collector's path when the C extension is not built);
* columns (C): ``trace_table(request, body)``, values read from the bytes by the C wire
  decoder ``tracerl.collector._otlp_wire``: what the collector runs (``TableKind.build``).

Every path includes the protobuf parse (the collector parses every body to validate it).
All are checked to produce the same table first. CPU time (``process_time``), best of
``--repeat`` rounds, so other jobs on the machine distort it less than wall-clock rates::

    python benchmarks/collector_convert.py
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import pyarrow as pa
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tracerl.collector import columns
from tracerl.collector.columns import trace_table
from tracerl.collector.otlp import trace_rows
from tracerl.schemas.spans import spans_table
from tracerl_testing.loadgen import encode_batches, make_spans


def best_cpu_per_span(convert: Callable[[bytes], pa.Table], bodies: list[bytes], repeat: int) -> float:
    """Best CPU µs per span over ``repeat`` rounds of parsing and converting every body."""
    best = float("inf")
    for _ in range(repeat):
        started, spans = time.process_time(), 0
        for body in bodies:
            spans += convert(body).num_rows
        best = min(best, (time.process_time() - started) / spans * 1e6)
    return best


def parse(body: bytes) -> ExportTraceServiceRequest:
    return ExportTraceServiceRequest.FromString(body)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--spans", type=int, default=4096)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--tokens", choices=["packed", "plain"], default="packed")
    args = parser.parse_args()
    bodies = encode_batches(make_spans(args.spans, packed=args.tokens == "packed"), args.batch)
    paths = {
        "rows (span_row per span)": lambda body: spans_table(trace_rows(parse(body)).rows),
        "columns, Python (protobuf objects)": lambda body: trace_table(parse(body))[0],
        "columns, C (wire decoder)": lambda body: trace_table(parse(body), body)[0],
    }
    if not columns.HAVE_WIRE_DECODER:
        print(f"the C wire decoder is not built: {columns.CONVERTER}")
        del paths["columns, C (wire decoder)"]
    for body in bodies:  # same stored values before any timing
        expected = spans_table(trace_rows(parse(body)).rows).to_pylist()
        assert all(convert(body).to_pylist() == expected for convert in paths.values())
    print(f"{len(bodies)} requests x {args.batch} spans, 1 in 4 an LLM call ({args.tokens} token ids); "
          f"parse + convert, CPU time, best of {args.repeat}")
    figures = {name: best_cpu_per_span(convert, bodies, args.repeat) for name, convert in paths.items()}
    base = figures["rows (span_row per span)"]
    print(f"{'path':36s} {'CPU us/span':>12s} {'spans/CPU-s':>12s} {'vs rows':>8s}")
    for name, us in figures.items():
        print(f"{name:36s} {us:12.1f} {1e6 / us:12,.0f} {base / us:7.2f}x")


if __name__ == "__main__":
    main()
