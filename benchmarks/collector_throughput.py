"""Collector throughput: sustained spans/s and p99 acknowledgement latency, side by side.

Runs, in one process and on the same pre-encoded OTLP requests (batches of 512 spans
made by the real OTel SDK and encoded by the OTLP exporter's own encoder):

* ``tracerl collector serve`` over OTLP/HTTP protobuf and over OTLP/gRPC (acknowledged
  only once durable: WAL fsync, group commit);
* (a) the in-process Parquet exporter (``tracerl.instrumentation``) writing the same spans;
* (b) the OTLP/HTTP endpoint of the ``agentlightning`` store (``agl store``), if its
  ``agl`` executable is given (``--agl`` or ``$TRACERL_BENCH_AGL``); it must be installed
  in a separate virtualenv (it is not a tracerl dependency).

Closed loop: ``--clients`` connections each send the next request as soon as the previous
one is acknowledged; a 429/503 reply is retried after its Retry-After. Only 200 replies
count. The load generator shares the machine, so its own CPU is printed too (pre-encoded
bodies over keep-alive connections: a few per cent of one core). Usage::

    python benchmarks/collector_throughput.py --duration 10 --agl /tmp/aglvenv/bin/agl
"""

from __future__ import annotations

import argparse
import http.client
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import grpc
import httpx
import pyarrow.parquet as pq
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from opentelemetry.sdk.trace.export import SpanExportResult

from tracerl.instrumentation.parquet_exporter import ParquetSpanExporter
from tracerl.schemas import attributes as A
from tracerl_testing.loadgen import encode_batches, make_spans
from tracerl.core.net import free_port
from tracerl_testing.net import wait_http
from tracerl_testing.tables import table_files

GRPC_METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


@dataclass
class Result:
    name: str
    spans: int
    seconds: float
    latencies: list[float]
    refused: int = 0
    cpu_seconds: float = float("nan")  # of the receiving process(es) during the run
    client_cpu_seconds: float = float("nan")  # of this process (the load generator) during the run

    @property
    def per_core(self) -> float:
        """Spans per CPU-second of the receiver: what one uncontended core would sustain."""
        return self.spans / self.cpu_seconds if self.cpu_seconds else float("nan")

    @property
    def rate(self) -> float:
        return self.spans / self.seconds if self.seconds else 0.0

    @property
    def client_share(self) -> float:
        """The load generator's CPU as a share of one core: it runs on the same machine."""
        return self.client_cpu_seconds / self.seconds if self.seconds else float("nan")

    def pct(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000 if ordered else float("nan")


def cpu_seconds(pid: int, descendants: bool = True) -> float:
    """User + system CPU time of a process (all threads) and, optionally, its descendants (Linux)."""
    tick = os.sysconf("SC_CLK_TCK")
    total, todo = 0.0, [pid]
    while todo:
        current = todo.pop()
        try:
            fields = Path(f"/proc/{current}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
            if descendants:
                for task in Path(f"/proc/{current}/task").iterdir():
                    todo += [int(child) for child in (task / "children").read_text().split()]
        except FileNotFoundError:
            continue
    return total


def closed_loop(name: str, send: Callable[[int, int], float | None], batches: int, batch: int,
                clients: int, duration: float, receiver: tuple[int, bool] | None = None) -> Result:
    """``send(client, batch_index)`` returns seconds to wait before a retry (refused) or None (acknowledged).

    ``receiver`` = (pid, with descendants) whose CPU time is measured over the run."""
    cpu_before = cpu_seconds(*receiver) if receiver else 0.0
    client_before = time.process_time()
    latencies: list[list[float]] = [[] for _ in range(clients)]
    refused = [0] * clients
    stop = time.monotonic() + duration

    def run(k: int) -> None:
        i = k
        while time.monotonic() < stop:
            started = time.perf_counter()
            retry = send(k, i % batches)
            if retry is None:
                latencies[k].append(time.perf_counter() - started)
                i += clients
            else:
                refused[k] += 1
                time.sleep(retry)

    started = time.monotonic()
    threads = [threading.Thread(target=run, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - started
    flat = [x for per in latencies for x in per]
    cpu = cpu_seconds(*receiver) - cpu_before if receiver else float("nan")
    client = time.process_time() - client_before if receiver and receiver[0] != os.getpid() else float("nan")
    return Result(name, len(flat) * batch, elapsed, flat, sum(refused), cpu, client)


def http_sender(port: int, clients: int, bodies: list[bytes]) -> Callable[[int, int], float | None]:
    connections = [http.client.HTTPConnection("127.0.0.1", port, timeout=120) for _ in range(clients)]

    def send(k: int, i: int) -> float | None:
        conn = connections[k]
        conn.request("POST", "/v1/traces", body=bodies[i], headers={A.CONTENT_TYPE_HEADER: "application/x-protobuf"})
        reply = conn.getresponse()
        reply.read()
        if reply.status == 200:
            return None
        if reply.status in (429, 503):
            return float(reply.headers.get(A.RETRY_AFTER_HEADER, "1"))
        raise RuntimeError(f"HTTP {reply.status} from port {port}")

    return send


def grpc_sender(port: int, clients: int, bodies: list[bytes]) -> Callable[[int, int], float | None]:
    channels = [grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.max_send_message_length", 64 << 20),
                                                                   ("grpc.use_local_subchannel_pool", 1)])
                for _ in range(clients)]
    calls = [c.unary_unary(GRPC_METHOD, request_serializer=None, response_deserializer=ExportTraceServiceResponse.FromString)
             for c in channels]

    def send(k: int, i: int) -> float | None:
        try:
            calls[k](bodies[i], timeout=120)
        except grpc.RpcError as exc:
            if exc.code() is grpc.StatusCode.RESOURCE_EXHAUSTED:
                return 1.0
            raise
        return None

    return send


def start_tracerl(out: Path, *options: str) -> tuple[subprocess.Popen, int, int | None]:
    """``tracerl collector serve --out OUT`` on free ports with ``options``; its process and ports (gRPC None when off)."""
    command = [sys.executable, "-m", "tracerl", "collector", "serve", "--out", str(out), "--http-port", "0",
               "--grpc-port", "0", "--log-level", "warning", *options]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    match = re.search(r"OTLP/HTTP \S+:(\d+) OTLP/gRPC (\d+|off)", line)
    if not match:
        proc.kill()
        raise RuntimeError(f"tracerl collector did not start: {line!r}")
    return proc, int(match.group(1)), None if match.group(2) == "off" else int(match.group(2))


def start_agl(agl: str) -> tuple[subprocess.Popen, int]:
    port = free_port()
    env = dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True")
    proc = subprocess.Popen([agl, "store", "--host", "127.0.0.1", "--port", str(port)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_http(f"http://127.0.0.1:{port}/v1/agl/health", timeout_s=120)
    return proc, port


def peer_version(agl: str | None) -> str | None:
    """The ``agentlightning`` version installed beside the ``agl`` executable, asked of that
    virtualenv's own interpreter (importlib.metadata); None when it is not installed there."""
    found = shutil.which(agl) if agl else None
    python = Path(found).parent / "python" if found else None
    if python is None or not python.exists():
        return None
    asked = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('agentlightning'))"],
        capture_output=True, text=True,
    )
    return asked.stdout.strip() if asked.returncode == 0 else None


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()


def count_rows(data_dir: Path) -> int:
    return sum(pq.read_metadata(p).num_rows for p in table_files(data_dir, "spans"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per target")
    parser.add_argument("--clients", type=int, default=4, help="concurrent connections")
    parser.add_argument("--batch", type=int, default=512, help="spans per request")
    parser.add_argument("--batches", type=int, default=16, help="distinct pre-encoded requests")
    parser.add_argument("--tokens", choices=["packed", "plain"], default="packed",
                        help="token ids as tokpack strings or as OTel int arrays")
    parser.add_argument("--workers", type=int, default=1, help="tracerl collector worker processes")
    parser.add_argument("--agl", default=os.environ.get("TRACERL_BENCH_AGL"),
                        help="path of the agentlightning venv's `agl` (or $TRACERL_BENCH_AGL)")
    args = parser.parse_args()

    results: list[Result] = []
    load_before = os.getloadavg()[0]
    tmp = Path(tempfile.mkdtemp(prefix="collector-bench-"))
    resource = {}
    agl_proc = None
    agl_version = peer_version(args.agl)
    if agl_version is not None:
        print(f"peer: agentlightning {agl_version} ({shutil.which(args.agl)})")
        agl_proc, agl_port = start_agl(shutil.which(args.agl))
        # the store only keeps spans of a rollout it knows: start one, tag every span with it
        rollout = httpx.post(f"http://127.0.0.1:{agl_port}/v1/agl/rollouts", json={"input": {"task": "bench"}}).json()
        resource = {A.AGENTLIGHTNING_ROLLOUT_ID: rollout["rollout_id"],
                    A.AGENTLIGHTNING_ATTEMPT_ID: rollout["attempt"]["attempt_id"]}
    else:
        print(f"peer: agentlightning not installed beside `agl` (--agl {args.agl!r}), skipped; install it in its own venv:\n"
              "  python3 -m venv /tmp/aglvenv && /tmp/aglvenv/bin/pip install torch==2.13.0 agentlightning==0.3.0")

    spans = make_spans(args.batch * args.batches, packed=args.tokens == "packed", resource=resource)
    bodies = encode_batches(spans, args.batch)
    per_span = sum(map(len, bodies)) / len(spans)
    print(f"workload: {len(bodies)} requests x {args.batch} spans, 1 in 4 an LLM call with 300+60 token ids "
          f"({args.tokens}), {per_span:.0f} B/span on the wire; {args.clients} clients, {args.duration:g}s each; "
          f"{os.cpu_count()} CPUs")

    try:
        proc, http_port, grpc_port = start_tracerl(tmp / "tracerl", *(["--workers", str(args.workers)] if args.workers > 1 else []))
        n = len(bodies)
        try:
            warm = closed_loop("warm-up", http_sender(http_port, 1, bodies), n, args.batch, 1, 1.0)
            results.append(closed_loop("tracerl collector, OTLP/HTTP protobuf", http_sender(http_port, args.clients, bodies),
                                       n, args.batch, args.clients, args.duration, (proc.pid, True)))
            results.append(closed_loop("tracerl collector, OTLP/gRPC", grpc_sender(grpc_port, args.clients, bodies),
                                       n, args.batch, args.clients, args.duration, (proc.pid, True)))
        finally:
            stop(proc)
        acked = warm.spans + sum(r.spans for r in results)
        print(f"tracerl: {acked} spans acknowledged, {count_rows(tmp / 'tracerl')} in Parquet after shutdown")

        exporter = ParquetSpanExporter(tmp / "inprocess")
        chunks = [spans[i : i + args.batch] for i in range(0, len(spans), args.batch)]

        def export_in_process(_k: int, i: int) -> None:
            if exporter.export(chunks[i]) is not SpanExportResult.SUCCESS:
                raise RuntimeError("in-process export failed")

        results.append(closed_loop("(a) in-process ParquetSpanExporter", export_in_process, n, args.batch, 1, args.duration,
                                   (os.getpid(), False)))
        exporter.shutdown()  # commits the rows it still holds (it writes a file per 8192 rows)

        if agl_proc is not None:
            closed_loop("warm-up", http_sender(agl_port, 1, bodies), n, args.batch, 1, 1.0)
            results.append(closed_loop(f"(b) agentlightning {agl_version} store, OTLP/HTTP", http_sender(agl_port, args.clients, bodies),
                                       n, args.batch, args.clients, args.duration, (agl_proc.pid, True)))
    finally:
        if agl_proc is not None:
            stop(agl_proc)
        shutil.rmtree(tmp, ignore_errors=True)

    base = results[0].rate
    print(f"load average before / after the run: {load_before:.1f} / {os.getloadavg()[0]:.1f} (other processes on "
          f"these {os.cpu_count()} CPUs slow everything; spans per receiver CPU-second is the contention-free figure)")
    print(f"\n{'target':44s} {'spans/s':>10s} {'vs tracerl HTTP':>16s} {'p50 ms':>8s} {'p99 ms':>8s} {'refused':>8s} "
          f"{'spans/CPU-s':>12s} {'client CPU':>11s}")
    for r in results:
        client = "-" if r.client_cpu_seconds != r.client_cpu_seconds else f"{r.client_share:.0%}"
        print(f"{r.name:44s} {r.rate:10,.0f} {r.rate / base:15.2f}x {r.pct(0.5):8.1f} {r.pct(0.99):8.1f} {r.refused:8d} "
              f"{r.per_core:12,.0f} {client:>11s}")
    print("(client CPU: the load generator in this process, as a share of one core)")


if __name__ == "__main__":
    main()
