"""Where capture's CPU goes: the cost of each stage after the call, by switching stages off in turn.

``capture_overhead.py`` says what capture costs in all; this says which stage it is spent in.
The same workload (paired calls against the scripted 10 ms vLLM-like server, each configuration
in a fresh process, CPU of the whole process per captured call) runs five ways, in alternating
rounds:

* ``none``: no instrumentation (the method's floor);
* ``tracerl``: capture as shipped;
* ``no commit``: spans become rows, but the rows are never written to Parquet;
* ``no export``: the batch span processor hands spans to an exporter that drops them;
* ``no finish``: the calling thread does its part (request plan, answer split), the span
  finisher's jobs are dropped.

Each stage's cost is the difference between two neighbours (the Parquet commit: ``tracerl`` minus
``no commit``; turning spans into rows: ``no commit`` minus ``no export``; making the span on the
finisher: ``no export`` minus ``no finish``; the calling thread's part: ``no finish`` minus
``none``). Switching a stage off also removes its garbage and its cache misses, which is part of
what it costs. The switches are monkeypatches of this benchmark's child process; nothing in
tracerl knows about them.

    python benchmarks/capture_breakdown.py                # 400 calls x 3 rounds
"""

from __future__ import annotations

import os
import statistics

import capture_overhead

MODES = ("none", "tracerl", "no commit", "no export", "no finish")
STAGES = (  # (what, mode with it, mode without it)
    ("calling thread (request plan, answer split, hand-over)", "no finish", "none"),
    ("span finisher (span attributes, token packing, processors)", "no export", "no finish"),
    ("spans to rows (batch processor, Parquet exporter's conversion)", "no commit", "no export"),
    ("Parquet commits (every 5 s and on flush)", "tracerl", "no commit"),
)


def child(mode: str, url: str, calls: int, warmup: int) -> None:
    """Run ``capture_overhead``'s timed child with ``mode``'s stages switched off."""
    from opentelemetry.sdk.trace.export import SpanExportResult

    from tracerl.instrumentation import parquet_exporter, span_finisher

    capture_overhead.recorded_keys = lambda data_dir: []  # switched-off stages leave no file to read
    if mode == "no commit":
        parquet_exporter.ParquetSpanExporter._commit = lambda self: (self._pending.clear(), True)[1]
    elif mode == "no export":
        parquet_exporter.ParquetSpanExporter.export = lambda self, spans: SpanExportResult.SUCCESS
    elif mode == "no finish":
        span_finisher.submit = lambda job: None
    capture_overhead.child("none" if mode == "none" else "tracerl", url, calls, warmup)


def main() -> None:
    args = capture_overhead.arguments(__doc__, MODES, rounds=3)
    if args.child:
        child(args.child, args.url, args.calls, args.warmup)
        return

    from rich.progress import Progress

    from tracerl_testing.scripted_server import running_scripted_server

    runs: dict[str, list[float]] = {mode: [] for mode in MODES}
    with running_scripted_server(latency_s=args.latency_ms / 1e3) as server, Progress() as progress:
        task = progress.add_task("measuring", total=args.rounds * len(MODES))
        for _ in range(args.rounds):
            for mode in MODES:
                runs[mode].append(capture_overhead.measure(mode, server.base_url, args.calls, args.warmup, script=__file__)["all_us"])
                progress.advance(task)
    cpu = {mode: statistics.median(values) for mode, values in runs.items()}
    total = cpu["tracerl"] - cpu["none"]
    print(f"Capture's CPU per LLM call by stage, {args.latency_ms:g} ms server "
          f"(median of {args.rounds} rounds x {args.calls} paired calls; whole process, all threads)\n")
    print("| stage | CPU per call | share |\n|---|---:|---:|")
    for what, on, off in STAGES:
        cost = cpu[on] - cpu[off]
        print(f"| {what} | {cost:+.0f} us | {100 * cost / total:.0f} % |")
    print(f"| **capture in all** | **{total:+.0f} us** | 100 % |")
    print("\nper mode, CPU per call (us): " + ", ".join(f"{m} {cpu[m]:.0f} ({min(runs[m]):.0f}-{max(runs[m]):.0f})" for m in MODES))
    print(f"load average now {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
