"""Capture overhead per LLM call: no instrumentation vs OpenLLMetry alone vs tracerl.

One run measures all three side by side, each in its own fresh process (instrumentation
is process-global), against the same local vLLM-like server that takes 10 ms per call.
Figures per configuration: the agent process's CPU time per call (all its threads,
the span export included; robust on a busy machine, and exactly what capture costs the
agent), the part of it spent in the calling thread (what lies on the call's path; the
rest is the exporter's background thread) and the wall time per call (what the agent
waits; noisy when cores are shared).
"OpenLLMetry alone" exports to the same Parquet sink as tracerl, so the difference
between them is exactly tracerl's hooks: episode stamping, the attribute policy,
asking for/reading/stripping token ids, the larger response that carries them.
Rounds alternate the configurations and the median round is reported, to damp the
noise of a shared machine.

    python benchmarks/capture_overhead.py            # defaults: 400 calls x 5 rounds
    python benchmarks/capture_overhead.py --calls 200 --rounds 3
Target (issue 3): tracerl adds < 200 us per call and < 5 % of a 10 ms call.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time

CONFIGS = ("none", "openllmetry", "tracerl")
PROMPT = "You are a careful assistant. " * 40 + "What is 6*7? Use the calculator tool if needed."
TOOLS = [{"type": "function", "function": {"name": "calc", "parameters": {"type": "object", "properties": {"expr": {"type": "string"}}}}}]


def child(config: str, url: str, calls: int, warmup: int) -> None:
    """Time ``calls`` chat calls under one configuration; print one JSON line."""
    data_dir = tempfile.mkdtemp(prefix="capture-bench-")
    provider = None
    if config == "openllmetry":
        from opentelemetry import trace
        from opentelemetry.instrumentation.openai import OpenAIInstrumentor
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        from tracerl.instrumentation.parquet_exporter import ParquetSpanExporter

        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(ParquetSpanExporter(data_dir)))
        trace.set_tracer_provider(provider)
        OpenAIInstrumentor().instrument()
    elif config == "tracerl":
        import tracerl

        provider = tracerl.instrument(data_dir=data_dir)
    import openai

    client = openai.OpenAI(base_url=url, api_key="sk-bench", max_retries=0)
    messages = [{"role": "system", "content": PROMPT}, {"role": "user", "content": "6*7?"},
                {"role": "assistant", "content": "Let me compute."}, {"role": "user", "content": "go"}]

    def one() -> None:
        reply = client.chat.completions.create(model="m", messages=messages, tools=TOOLS, max_tokens=64)
        assert reply.choices[0].message.tool_calls  # the agent sees a normal answer

    for _ in range(warmup):
        one()
    if provider is not None:
        provider.force_flush()  # first export (Parquet writer set-up) outside the timing
    times = []
    cpu_start, thread_start = time.process_time_ns(), time.thread_time_ns()
    for _ in range(calls):
        start = time.perf_counter_ns()
        one()
        times.append(time.perf_counter_ns() - start)
    thread_ns = time.thread_time_ns() - thread_start
    if provider is not None:
        provider.shutdown()  # the export of the timed spans is part of the cost
    cpu_us = (time.process_time_ns() - cpu_start) / calls / 1e3
    print(json.dumps({"wall_us": statistics.fmean(times) / 1e3, "cpu_us": cpu_us, "call_cpu_us": thread_ns / calls / 1e3}))


def measure(config: str, url: str, calls: int, warmup: int) -> dict:
    command = [sys.executable, __file__, "--child", config, "--url", url, "--calls", str(calls), "--warmup", str(warmup)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{config} run failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--latency-ms", type=float, default=10.0)
    parser.add_argument("--child", choices=CONFIGS)
    parser.add_argument("--url")
    args = parser.parse_args()
    if args.child:
        child(args.child, args.url, args.calls, args.warmup)
        return

    from rich.console import Console
    from rich.progress import Progress
    from rich.table import Table

    from tracerl.instrumentation.scripted_server import running_scripted_server

    results: dict[str, dict[str, list[float]]] = {c: {"cpu_us": [], "call_cpu_us": [], "wall_us": []} for c in CONFIGS}
    with running_scripted_server(latency_s=args.latency_ms / 1e3) as server, Progress() as progress:
        task = progress.add_task("measuring", total=args.rounds * len(CONFIGS))
        for _ in range(args.rounds):
            for config in CONFIGS:
                for key, value in measure(config, server.base_url, args.calls, args.warmup).items():
                    results[config][key].append(value)
                progress.advance(task)

    med = {c: {k: statistics.median(v) for k, v in results[c].items()} for c in CONFIGS}
    call_us = args.latency_ms * 1e3
    table = Table(title=f"Capture cost per LLM call, {args.latency_ms:g} ms server (median of {args.rounds} rounds x {args.calls} calls)")
    columns = ("configuration", "agent CPU/call", "added CPU vs none", "added, % of call",
               "added CPU in the calling thread", "wall/call", "added wall vs none")
    for column in columns:
        table.add_column(column, justify="right")
    for config in CONFIGS:
        added = med[config]["cpu_us"] - med["none"]["cpu_us"]
        table.add_row(
            {"none": "no instrumentation", "openllmetry": "OpenLLMetry alone", "tracerl": "tracerl"}[config],
            f"{med[config]['cpu_us']:.0f} us", f"{added:+.0f} us", f"{100 * added / call_us:.1f} %",
            f"{med[config]['call_cpu_us'] - med['none']['call_cpu_us']:+.0f} us",
            f"{med[config]['wall_us']:.0f} us", f"{med[config]['wall_us'] - med['none']['wall_us']:+.0f} us",
        )
    Console().print(table)
    ours = med["tracerl"]["cpu_us"] - med["openllmetry"]["cpu_us"]
    print(f"tracerl's hooks on top of OpenLLMetry: {ours:+.0f} us CPU per call "
          f"({med['tracerl']['cpu_us'] / med['openllmetry']['cpu_us']:.2f}x OpenLLMetry's total)")


if __name__ == "__main__":
    main()
