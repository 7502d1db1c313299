"""The collector under overload: peak memory, goodput and refusals, with clients that honour
Retry-After and clients that ignore it.

``--clients`` connections each send large OTLP/HTTP requests (``--batch`` spans with token ids as
plain OTel int arrays, ~0.5 MB a request, what other producers send) as fast as they are answered,
for ``--duration`` seconds, to one ``tracerl collector serve`` worker started with small limits
(``--max-inflight-mb``, ``--max-backlog-mb``). Run once with clients that wait the Retry-After of a
429/503 and once with clients that retry at once. Printed per run: the collector's peak RSS
(sampled every 20 ms from /proc) against the target of 150 MB + 2 x the configured limits, spans
acknowledged per second, 200/429/503 replies, and the spans in Parquet after a clean shutdown,
which must equal those acknowledged.

    python benchmarks/collector_overload.py                  # 64 clients, 15 s each mode, limits 8 + 16 MiB
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import tempfile
import threading
import time
from pathlib import Path

from collector_throughput import count_rows, start_tracerl
from tracerl_testing.loadgen import encode_batches, flood, make_spans

MiB = 1 << 20


def tree_rss(pid: int) -> int:
    """Resident bytes of ``pid`` and its descendants (the collector's workers)."""
    total, stack = 0, [pid]
    while stack:
        p = stack.pop()
        try:
            status = Path(f"/proc/{p}/status").read_text()
            children = Path(f"/proc/{p}/task/{p}/children").read_text().split()
        except OSError:
            continue
        total += int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1)) * 1024
        stack += [int(c) for c in children]
    return total


def run(mode: str, args: argparse.Namespace, bodies: list[bytes]) -> dict:
    out = Path(tempfile.mkdtemp(prefix=f"collector-overload-{mode}-"))
    proc, port, _ = start_tracerl(out, "--grpc-port", "-1", "--max-inflight-mb", str(args.max_inflight_mb),
                                  "--max-backlog-mb", str(args.max_backlog_mb))
    idle = tree_rss(proc.pid)
    peak, sampling = idle, True

    def sample() -> None:
        nonlocal peak
        while sampling:
            peak = max(peak, tree_rss(proc.pid))
            time.sleep(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    began = time.monotonic()
    tally = flood(port, bodies, args.clients, args.duration, honour_retry_after=mode == "honour")
    elapsed = time.monotonic() - began
    sampling = False
    sampler.join()
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=120)
    stored = count_rows(out)
    acked = len(tally.acknowledged) * args.batch
    return {"mode": mode, "idle_mib": idle / MiB, "peak_mib": peak / MiB, "goodput": acked / elapsed,
            "acked": acked, "stored": stored, "replies": dict(sorted(tally.replies.items()))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--duration", type=float, default=15.0, help="seconds per mode")
    parser.add_argument("--batch", type=int, default=512, help="spans per request")
    parser.add_argument("--max-inflight-mb", type=int, default=8)
    parser.add_argument("--max-backlog-mb", type=int, default=16)
    parser.add_argument("--modes", nargs="+", choices=["honour", "ignore"], default=["honour", "ignore"])
    args = parser.parse_args()
    bodies = encode_batches(make_spans(args.batch * 8, packed=False), args.batch)
    target = 150 + 2 * (args.max_inflight_mb + args.max_backlog_mb)
    print(f"workload: {args.clients} clients, requests of {args.batch} spans ({sum(map(len, bodies)) / len(bodies) / 1e3:.0f} KB, "
          f"token ids as plain int arrays), {args.duration:g} s per mode; collector: 1 worker, --max-inflight-mb "
          f"{args.max_inflight_mb} --max-backlog-mb {args.max_backlog_mb}; target peak RSS <= {target} MiB; "
          f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}\n")
    print("| clients | idle RSS MiB | peak RSS MiB | peak / target | spans acked/s | 200 | 429 | 503 | errors | acked | in Parquet |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for mode in args.modes:
        r = run(mode, args, bodies)
        replies = r["replies"]
        print(f"| {mode} Retry-After | {r['idle_mib']:.0f} | {r['peak_mib']:.0f} | {r['peak_mib'] / target:.2f}x | {r['goodput']:,.0f} "
              f"| {replies.get(200, 0)} | {replies.get(429, 0)} | {replies.get(503, 0)} | {replies.get(-1, 0)} | {r['acked']:,} "
              f"| {r['stored']:,}{'' if r['stored'] == r['acked'] else ' (MISMATCH)'} |", flush=True)


if __name__ == "__main__":
    main()
