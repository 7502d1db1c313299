"""Throughput of the built-in policy server: continuous batching against one-at-a-time serving.

Both servers run the same code over the tiny model; the peer has ``max_batch_size=1``,
which is what serving requests "under a lock" amounts to. Clients are threads sending
chat requests over HTTP, as the demo's agents do. Printed side by side, with ratios.

    python benchmarks/server_throughput.py                 # 1 and 32 clients, 64 requests each
    python benchmarks/server_throughput.py --clients 1 8 32 --requests 128 --max-tokens 48
"""

from __future__ import annotations

import argparse
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import httpx

from tracerl.trainer.serving.app import running_server
from tracerl.trainer.serving.config import EngineConfig


def run_load(base_url: str, clients: int, requests: int, max_tokens: int) -> dict:
    """Send ``requests`` chat requests from ``clients`` threads; return rates and latency."""

    def one(i: int) -> tuple[int, float]:
        body = {
            "messages": [{"role": "user", "content": f"task: add {i % 10} {i % 7} ; answer:" + " x" * (i % 13)}],
            "max_tokens": max_tokens,
            "temperature": 1.0,
            "seed": i,
            "ignore_eos": True,  # every reply is max_tokens long: equal work in both modes
            "return_token_ids": True,
        }
        start = time.perf_counter()
        reply = http.post(f"{base_url}/chat/completions", json=body, timeout=600)
        reply.raise_for_status()
        return reply.json()["usage"]["completion_tokens"], time.perf_counter() - start

    with httpx.Client(limits=httpx.Limits(max_connections=clients)) as http:
        one(0)  # warm-up
        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=clients) as pool:
            results = list(pool.map(one, range(requests)))
        elapsed = time.perf_counter() - start
    tokens = sum(t for t, _ in results)
    return {
        "req_s": requests / elapsed,
        "tok_s": tokens / elapsed,
        "p50_s": statistics.median(lat for _, lat in results),
        "tokens": tokens,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1, help="torch threads of the decoding loop (0: torch's default)")
    args = parser.parse_args()

    rows = {}
    for mode, batch in (("batched", 64), ("serial", 1)):
        with running_server(engine_config=EngineConfig(max_batch_size=batch, num_threads=args.threads or None)) as server:
            for clients in args.clients:
                rows[mode, clients] = run_load(server.base_url, clients, args.requests, args.max_tokens)

    print(f"{args.requests} chat requests, max_tokens={args.max_tokens}, tiny model, decode threads={args.threads or 'torch default'}")
    print(f"{'clients':>7} | {'mode':>7} | {'req/s':>7} | {'tok/s':>7} | {'p50 s':>6} || batched/serial tok/s")
    for clients in args.clients:
        for mode in ("batched", "serial"):
            r = rows[mode, clients]
            ratio = rows["batched", clients]["tok_s"] / rows["serial", clients]["tok_s"] if mode == "batched" else None
            tail = f"{ratio:.2f}x" if ratio else ""
            print(f"{clients:>7} | {mode:>7} | {r['req_s']:>7.2f} | {r['tok_s']:>7.1f} | {r['p50_s']:>6.2f} || {tail}")


if __name__ == "__main__":
    main()
