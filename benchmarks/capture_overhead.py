"""Capture overhead per LLM call: no instrumentation, OpenLLMetry alone, tracerl without
token capture, tracerl; and tracerl's for each API an agent speaks (Chat Completions, the
Responses API, Anthropic's Messages API).

One run measures them side by side against the same local vLLM-like server that takes 10 ms
per call and answers all three APIs with the token fields ``tracerl serve`` gives
(``tracerl_testing.scripted_server``), each configuration in its own fresh process
(instrumentation is process-global). Inside a process every captured call is paired with an
uncaptured one made right next to it under OTel's ``suppress_instrumentation()``, which both
tracerl and OpenLLMetry honour; the pair differs only by the capture, so the noise of a
shared machine (other processes, CPU frequency, caches) largely cancels. Figures per call:

* added on the call's path: calling-thread CPU, captured minus uncaptured (the median
  over pairs: a garbage collection lands on whichever call allocates when it is due, so
  means swing by +-100 us; collections are counted in "CPU in all"); what the agent
  waits for on top of the call;
* added in background threads: the rest of the process's CPU over the run (tracerl's
  span finisher, the span export to Parquet), charged to the captured calls, minus the
  same with no instrumentation (the benchmark's own loop between calls);
* added CPU in all: the two above together, per captured call: the mean calling-thread
  difference (garbage collections included, wherever they land) plus the background
  threads, minus the same figure with no instrumentation. Both terms are taken inside one
  process, so the machine's speed, which drifts by +-5 % between processes here, cancels;
* wall: median per call, and the median captured-minus-uncaptured difference; and of that
  difference, the server's own part (its ``Server-Timing``): asking for token ids and
  log-probs makes the server return more, which is the server's cost, not the client's.

"OpenLLMetry alone" exports to the same Parquet sink as tracerl, so the difference
between them is what each does per call; each row says what its spans record. OpenLLMetry
and tracerl without token capture (``TRACERL_TOKEN_CAPTURE=off``) record the same GenAI
attributes (request, messages, tool definitions, response, usage): that pair is the
like-for-like comparison. tracerl with token capture records more (the exact prompt and
completion token ids and log-probs, which it asks the server for and cuts out of the
answer), so its ratio to OpenLLMetry is the price of that, not of the same work.
"no instrumentation" runs the same pairs with nothing installed: its figures are the noise
floor of the method. Rounds alternate the configurations; the median round is reported.

Per API: the same agent call (the same system prompt, three turns and one tool, in the
API's own shape: ``chat.completions.create``, ``responses.create`` with ``instructions``,
the ``anthropic`` SDK's ``messages.create`` with ``system``) timed captured and uncaptured
under tracerl, beside the same pairs with nothing installed, printed side by side as ratios
(captured over uncaptured, and each API's added CPU over Chat Completions'). The Anthropic
SDK makes a span of its own around each call whenever a tracer provider is installed, as
tracerl installs one: that span is part of what switching capture on costs a Messages agent,
so its uncaptured call is made by a client with the SDK's spans off.

    python benchmarks/capture_overhead.py            # defaults: 400 calls x 5 rounds, all APIs
    python benchmarks/capture_overhead.py --quick    # 100 calls x 1 round: does it run (noisy, about a minute)
    python benchmarks/capture_overhead.py --calls 200 --rounds 3 --apis chat,messages
Target (issue 3): tracerl adds < 200 us per call and < 5 % of a 10 ms call.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from tracerl.schemas import environment as E

CONFIGS = ("none", "openllmetry", "tracerl-no-tokens", "tracerl")
APIS = ("chat", "responses", "messages")
API_NAMES = {"chat": "Chat Completions", "responses": "Responses API", "messages": "Anthropic Messages"}
# each API: the noise floor and capture as shipped; Chat Completions also beside OpenLLMetry
API_CONFIGS = {"chat": CONFIGS, "responses": ("none", "tracerl"), "messages": ("none", "tracerl")}
QUICK = {"calls": 100, "rounds": 1, "warmup": 10}  # --quick: does it run, not figures
# What each configuration's LLM-call spans record (the run prints the attribute keys they hold).
NAMES = {
    "none": "no instrumentation (noise floor)",
    "openllmetry": "OpenLLMetry alone",
    "tracerl-no-tokens": "tracerl, token capture off",
    "tracerl": "tracerl",
}
RECORDS = {
    "none": "nothing",
    "openllmetry": "GenAI: request, messages, tools, response, usage",
    "tracerl-no-tokens": "the same GenAI attributes (+ policy version)",
    "tracerl": "the same + exact token ids and log-probs",
}
PROMPT = "You are a careful assistant. " * 40 + "What is 6*7? Use the calculator tool if needed."
TURNS = [{"role": "user", "content": "6*7?"}, {"role": "assistant", "content": "Let me compute."}, {"role": "user", "content": "go"}]
CALC = {"name": "calc", "parameters": {"type": "object", "properties": {"expr": {"type": "string"}}}}
TOOLS = [{"type": "function", "function": CALC}]
RESPONSES_TOOLS = [{"type": "function", **CALC}]
MESSAGES_TOOLS = [{"name": CALC["name"], "input_schema": CALC["parameters"]}]

# a call: the raw response (its headers) and what the agent's SDK parsed of it
Call = Callable[[], "tuple[Any, Any]"]


def agent_calls(api: str, url: str) -> tuple[Call, Call, Callable[[Any], bool]]:
    """The agent's call in ``api``, the same call as made without capture, and whether a parsed
    reply called the tool (the agent sees a normal answer)."""
    if api == "messages":
        import anthropic

        root = url.removesuffix("/v1")  # the SDK appends /v1/messages itself
        client = anthropic.Anthropic(base_url=root, api_key="sk-bench", max_retries=0)
        # the SDK's own span exists because tracerl installs a tracer provider: the uncaptured call goes without it
        bare = anthropic.Anthropic(base_url=root, api_key="sk-bench", max_retries=0,
                                   open_telemetry={"traces": False, "propagation": False})

        def messages_call(sdk: Any) -> Call:
            def call() -> tuple[Any, Any]:
                raw = sdk.messages.with_raw_response.create(model="m", system=PROMPT, messages=TURNS, tools=MESSAGES_TOOLS, max_tokens=64)
                return raw, raw.parse()
            return call

        return messages_call(client), messages_call(bare), lambda reply: reply.stop_reason == "tool_use"
    import openai

    client = openai.OpenAI(base_url=url, api_key="sk-bench", max_retries=0)
    if api == "responses":
        def call() -> tuple[Any, Any]:
            raw = client.responses.with_raw_response.create(model="m", instructions=PROMPT, input=TURNS, tools=RESPONSES_TOOLS,
                                                            max_output_tokens=64)
            return raw, raw.parse()

        return call, call, lambda reply: any(item.type == "function_call" for item in reply.output)
    messages = [{"role": "system", "content": PROMPT}, *TURNS]

    def call() -> tuple[Any, Any]:
        raw = client.chat.completions.with_raw_response.create(model="m", messages=messages, tools=TOOLS, max_tokens=64)
        return raw, raw.parse()

    return call, call, lambda reply: bool(reply.choices[0].message.tool_calls)


def child(config: str, url: str, calls: int, warmup: int, api: str = "chat") -> None:
    """Time ``calls`` calls in ``api`` under one configuration, each paired with a call made under
    OTel's ``suppress_instrumentation()`` (which both tracerl and OpenLLMetry honour) right
    next to it in the same process: the pair differs only by the capture, so the noise of a
    shared machine (other processes, frequency, caches) largely cancels. Prints one JSON line."""
    from opentelemetry.instrumentation.utils import suppress_instrumentation

    if config not in API_CONFIGS[api]:
        raise SystemExit(f"--child {config} is measured for {', '.join(a for a in APIS if config in API_CONFIGS[a])} only, not --api {api}")

    data_dir = tempfile.mkdtemp(prefix="capture-bench-")
    provider = None
    if config == "openllmetry":
        from opentelemetry import trace
        from opentelemetry.instrumentation.openai import OpenAIInstrumentor
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        from tracerl.instrumentation.parquet_exporter import CommitOnFlush, ParquetSpanExporter
        from tracerl.instrumentation.settings import PARQUET_HANDOVER_MS

        provider = TracerProvider()
        # the same hand-over as tracerl's own Parquet pipeline, so the two differ only by their hooks;
        # CommitOnFlush as tracerl has it, so the final flush writes the last file in both (timed)
        provider.add_span_processor(BatchSpanProcessor(ParquetSpanExporter(data_dir), schedule_delay_millis=PARQUET_HANDOVER_MS))
        provider.add_span_processor(CommitOnFlush())
        trace.set_tracer_provider(provider)
        OpenAIInstrumentor().instrument()
    elif config.startswith("tracerl"):
        import tracerl

        if config == "tracerl-no-tokens":
            os.environ[E.TOKEN_CAPTURE_ENV] = "off"
        provider = tracerl.instrument(data_dir=data_dir)
    captured_call, uncaptured_call, called_tool = agent_calls(api, url)

    def timed(call: Call) -> tuple[int, int, float]:
        start_wall, start_cpu = time.perf_counter_ns(), time.thread_time_ns()
        raw, reply = call()
        taken = time.perf_counter_ns() - start_wall, time.thread_time_ns() - start_cpu
        assert called_tool(reply)  # the agent sees a normal answer
        # the server's own time (Server-Timing): returning tokens and log-probs costs it too
        return (*taken, float(raw.headers["server-timing"].partition("dur=")[2]) * 1e3)

    def one() -> tuple[int, int, float]:
        return timed(captured_call)

    def one_off() -> tuple[int, int, float]:
        with suppress_instrumentation():
            return timed(uncaptured_call)

    for _ in range(warmup):
        one()
        one_off()
    if provider is not None:
        provider.force_flush()  # first export (Parquet writer set-up) outside the timing
    # Start-up garbage (the imports' objects) is collected before timing, as a long-running
    # agent's would long have been: the full collections in the timed calls are then those
    # the calls themselves cause, not a start-up transient that a 400-call run over-weights.
    gc.collect()
    on: list[tuple[int, int, float]] = []
    off: list[tuple[int, int, float]] = []
    threads_start = thread_cpu_ns()
    cpu_start = time.process_time_ns()
    for i in range(calls):
        if i % 2:  # alternate which of the pair goes first
            on.append(one())
            off.append(one_off())
        else:
            off.append(one_off())
            on.append(one())
    if provider is not None:
        provider.force_flush()  # the export of the timed spans is part of the cost
    threads_ns = {name: ns - threads_start.get(name, 0) for name, ns in thread_cpu_ns().items()}
    process_ns = time.process_time_ns() - cpu_start
    calling_ns = sum(c for _, c, _ in on) + sum(c for _, c, _ in off)
    print(json.dumps({
        "call_cpu_us": statistics.fmean(c for _, c, _ in on) / 1e3,
        "call_cpu_off_median_us": statistics.median(c for _, c, _ in off) / 1e3,
        "path_us": statistics.median(a[1] - b[1] for a, b in zip(on, off)) / 1e3,
        "wall_us": statistics.median(w for w, _, _ in on) / 1e3,
        "wall_off_us": statistics.median(w for w, _, _ in off) / 1e3,
        "server_added_us": statistics.median(s for _, _, s in on) - statistics.median(s for _, _, s in off),
        # every other thread of the process (span finishing, export), charged to the captured calls
        "background_us": (process_ns - calling_ns) / calls / 1e3,
        # the mean paired difference plus everything outside the timed calls
        "all_us": (process_ns - 2 * sum(c for _, c, _ in off)) / calls / 1e3,
        "threads_us": {name: ns / calls / 1e3 for name, ns in threads_ns.items() if ns},
        "recorded": recorded_keys(data_dir) if provider is not None else [],
    }))


def recorded_keys(data_dir: str) -> list[str]:
    """The attribute keys of one LLM-call span this configuration wrote to Parquet (read
    after the timing): what its row in the table records. Not the Anthropic SDK's own span of
    the call (metadata only): the one capture made."""
    from tracerl.pipeline.source import raw_spans_of
    from tracerl.schemas import attributes as A

    with raw_spans_of(data_dir) as con:
        ((attributes, has_ids, has_logprobs),) = con.sql(
            f"SELECT attributes, prompt_token_ids IS NOT NULL, completion_logprobs IS NOT NULL FROM raw_spans "
            f"WHERE request_model IS NOT NULL AND scope_name IS DISTINCT FROM '{A.ANTHROPIC_SDK_SCOPE}' LIMIT 1"
        ).fetchall()
    keys = set(json.loads(attributes))  # token arrays live in their own columns, not in this JSON
    keys |= {A.PROMPT_TOKEN_IDS, A.COMPLETION_TOKEN_IDS} if has_ids else set()
    keys |= {A.COMPLETION_LOGPROBS} if has_logprobs else set()
    return sorted(keys)


def thread_cpu_ns() -> dict[str, int]:
    """CPU time of each thread but the main one, by name (Linux, Python >= 3.7)."""
    import threading

    out = {}
    for thread in threading.enumerate():
        if thread is threading.main_thread() or thread.ident is None:
            continue
        try:
            out[thread.name] = time.clock_gettime_ns(time.pthread_getcpuclockid(thread.ident))
        except (OSError, AttributeError):  # a thread that just ended; platforms without the clock
            continue
    return out


def measure(config: str, url: str, calls: int, warmup: int, script: str = __file__, api: str = "chat") -> dict:
    """The JSON line of ``script --child config`` (this file's, or a benchmark built on its child)."""
    command = [sys.executable, script, "--child", config, "--api", api, "--url", url, "--calls", str(calls), "--warmup", str(warmup)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{config} run ({api}) failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def arguments(description: str, children: tuple[str, ...], rounds: int, apis: tuple[str, ...] = ("chat",)) -> argparse.Namespace:
    """The command line of this benchmark and of those built on its child (``--child`` one of
    ``children``, calling in ``--api`` one of ``apis``; ``--apis``, which to measure, where there are several)."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, help="paired calls per configuration and round (default 400)")
    parser.add_argument("--rounds", type=int, help=f"rounds, each configuration once per round (default {rounds})")
    parser.add_argument("--warmup", type=int, help="untimed pairs first (default 30)")
    parser.add_argument("--quick", action="store_true",
                        help="a short run to see that it works: {calls} calls x {rounds} round, {warmup} warm-up pairs (too noisy for figures)".format(**QUICK))
    parser.add_argument("--latency-ms", type=float, default=10.0)
    parser.add_argument("--child", choices=children)
    parser.add_argument("--api", choices=apis, default=apis[0], help="the API the child calls")
    parser.add_argument("--url")
    if len(apis) > 1:
        parser.add_argument("--apis", default=",".join(apis), help=f"the APIs to measure, comma-separated (default {','.join(apis)})")
    args = parser.parse_args()
    defaults = QUICK if args.quick else {"calls": 400, "rounds": rounds, "warmup": 30}
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if len(apis) > 1:
        args.apis = tuple(dict.fromkeys(a.strip() for a in args.apis.split(",") if a.strip()))
        unknown = [a for a in args.apis if a not in apis]
        if unknown or not args.apis:
            parser.error(f"--apis {','.join(unknown) or '(none)'}: the APIs are {', '.join(apis)}")
    return args


def main() -> None:
    args = arguments(__doc__, CONFIGS, rounds=5, apis=APIS)
    if args.child:
        child(args.child, args.url, args.calls, args.warmup, args.api)
        return

    from rich.progress import Progress

    from tracerl_testing.scripted_server import running_scripted_server

    jobs = [(api, config) for api in args.apis for config in API_CONFIGS[api]]
    keys = ("path", "background", "total", "wall", "wall_off", "wall_added", "server_added", "call_cpu", "call_cpu_off")
    results: dict[tuple[str, str], dict[str, list[float]]] = {job: {k: [] for k in keys} for job in jobs}
    threads: dict[tuple[str, str], dict[str, list[float]]] = {}
    recorded: dict[tuple[str, str], list[str]] = {}
    with running_scripted_server(latency_s=args.latency_ms / 1e3) as server, Progress() as progress:
        task = progress.add_task("measuring", total=args.rounds * len(jobs))
        for _ in range(args.rounds):
            for api, config in jobs:
                m = measure(config, server.base_url, args.calls, args.warmup, api=api)
                row = results[api, config]
                row["path"].append(m["path_us"])
                row["background"].append(m["background_us"])
                row["total"].append(m["all_us"])
                row["wall"].append(m["wall_us"])
                row["wall_off"].append(m["wall_off_us"])
                row["wall_added"].append(m["wall_us"] - m["wall_off_us"])
                row["server_added"].append(m["server_added_us"])
                row["call_cpu"].append(m["call_cpu_us"])
                row["call_cpu_off"].append(m["call_cpu_off_median_us"])
                recorded[api, config] = m["recorded"]
                for name, us in m["threads_us"].items():
                    threads.setdefault((api, config), {}).setdefault(name, []).append(us)
                progress.advance(task)

    med = {job: {k: statistics.median(v) for k, v in results[job].items()} for job in jobs}
    for api, config in jobs:  # against the same pairs with nothing installed
        med[api, config]["total"] -= med[api, "none"]["total"]
        med[api, config]["background"] -= med[api, "none"]["background"]
    if "chat" in args.apis:
        print_configurations({c: med["chat", c] for c in CONFIGS}, {c: recorded["chat", c] for c in CONFIGS},
                             {c: threads.get(("chat", c), {}) for c in CONFIGS}, args)
    print_apis({api: med[api, "tracerl"] for api in args.apis}, {api: recorded[api, "tracerl"] for api in args.apis}, args)
    print(f"target (issue 3): < 200 us and < 5 % of a {args.latency_ms:g} ms call; load average now "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


def print_configurations(med: dict[str, dict[str, float]], recorded: dict[str, list[str]],
                         threads: dict[str, dict[str, list[float]]], args: argparse.Namespace) -> None:
    """Chat Completions under each configuration: tracerl beside OpenLLMetry alone."""
    from rich.console import Console
    from rich.table import Table

    call_us = args.latency_ms * 1e3
    table = Table(title=f"Capture cost per LLM call (Chat Completions), {args.latency_ms:g} ms server "
                        f"(median of {args.rounds} rounds x {args.calls} paired calls)")
    columns = ("configuration", "its spans record", "calling-thread CPU/call", "added on the call's path", "added in background threads",
               "added CPU in all", "% of a call", "wall/call", "added wall (median)", "of which the server's")
    for column in columns:
        table.add_column(column, justify="right")
    for config in CONFIGS:
        r = med[config]
        table.add_row(
            NAMES[config], RECORDS[config], f"{r['call_cpu']:.0f} us", f"{r['path']:+.0f} us", f"{r['background']:+.0f} us",
            f"{r['total']:+.0f} us", f"{100 * r['total'] / call_us:.1f} %", f"{r['wall']:.0f} us", f"{r['wall_added']:+.0f} us",
            f"{r['server_added']:+.0f} us",
        )
    Console(width=200).print(table)
    for config, by_name in threads.items():
        parts = ", ".join(f"{name} {statistics.median(v):.0f} us" for name, v in sorted(by_name.items()))
        print(f"background threads of {NAMES[config]}, CPU per call: {parts}")
    peer = set(recorded["openllmetry"])
    print(f"attributes of an LLM-call span, {NAMES['openllmetry']}: {', '.join(sorted(peer))}")
    for config in ("tracerl-no-tokens", "tracerl"):
        keys = set(recorded[config])
        print(f"  {NAMES[config]}: also {', '.join(sorted(keys - peer)) or 'nothing'}; "
              f"not {', '.join(sorted(peer - keys)) or 'nothing'}")
    theirs = med["openllmetry"]
    for config, what in (("tracerl-no-tokens", "like for like, the same GenAI attributes"),
                         ("tracerl", "tracerl records token ids and log-probs on top")):
        ours = med[config]
        print(f"{NAMES[config]} vs OpenLLMetry alone ({what}): {ours['path'] / theirs['path']:.2f}x on the call's path, "
              f"{ours['total'] / theirs['total']:.2f}x in all")


def print_apis(med: dict[str, dict[str, float]], recorded: dict[str, list[str]], args: argparse.Namespace) -> None:
    """tracerl's capture in each API side by side: captured over uncaptured, and over Chat Completions'."""
    from rich.console import Console
    from rich.table import Table

    from tracerl.schemas import attributes as A

    call_us = args.latency_ms * 1e3
    table = Table(title=f"tracerl's capture per API, {args.latency_ms:g} ms server "
                        f"(median of {args.rounds} rounds x {args.calls} paired calls, captured vs uncaptured)")
    # the calling thread's CPU: the median uncaptured call, and that plus the median paired difference
    columns = ("API", "token ids recorded", "calling-thread CPU/call uncaptured -> captured", "ratio", "wall/call uncaptured -> captured",
               "ratio", "added CPU in all", "% of a call")
    if "chat" in med:
        columns += ("added CPU in all vs Chat Completions",)
    for column in columns:
        table.add_column(column, justify="right")
    for api, r in med.items():
        keys = set(recorded[api])
        ids = "ids + log-probs" if {A.PROMPT_TOKEN_IDS, A.COMPLETION_LOGPROBS} <= keys else "ids" if A.PROMPT_TOKEN_IDS in keys else "NO"
        captured = r["call_cpu_off"] + r["path"]
        row = [API_NAMES[api], ids, f"{r['call_cpu_off']:.0f} -> {captured:.0f} us", f"{captured / r['call_cpu_off']:.2f}x",
               f"{r['wall_off']:.0f} -> {r['wall']:.0f} us", f"{r['wall'] / r['wall_off']:.3f}x",
               f"{r['total']:+.0f} us", f"{100 * r['total'] / call_us:.1f} %"]
        if "chat" in med:
            row.append(f"{r['total'] / med['chat']['total']:.2f}x")
        table.add_row(*row)
    Console(width=200).print(table)


if __name__ == "__main__":
    main()
