"""Token ids on spans that leave the process over OTLP: plain int arrays vs ``tokpack:``.

Every element of an OTel int array becomes its own protobuf ``AnyValue``; the packed
form is one string. This measures, side by side in one run, the agent-side cost per
span of (packing +) OTLP protobuf encoding and the encoded size, for LLM-call spans
carrying realistic token counts. It is why tracerl packs tokens only when spans go
over OTLP (``OTEL_TRACES_EXPORTER=otlp``) and keeps plain arrays for the in-process
Parquet sink (``TRACERL_TOKEN_ENCODING`` overrides).

    python benchmarks/capture_token_encoding.py [--spans 2000] [--prompt 300] [--completion 60]
"""

from __future__ import annotations

import argparse
import random
import time

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from rich.console import Console
from rich.table import Table

from tracerl.schemas import attributes as A
from tracerl.schemas.tokens import pack_floats, pack_ids


def make_spans(n: int, prompt: int, completion: int, packed: bool) -> tuple[list, float]:
    """``n`` finished LLM spans; returns them and the seconds spent packing."""
    rng = random.Random(0)
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("bench")
    pack_s = 0.0
    for _ in range(n):
        ids = [rng.randrange(150_000) for _ in range(prompt)]
        out = [rng.randrange(150_000) for _ in range(completion)]
        lps = [-rng.random() * 3 for _ in range(completion)]
        start = time.perf_counter()
        values = (pack_ids(ids), pack_ids(out), pack_floats(lps)) if packed else (ids, out, lps)
        pack_s += time.perf_counter() - start
        with tracer.start_as_current_span("chat m", attributes={A.GEN_AI_OPERATION: "chat"}) as span:
            span.set_attribute(A.PROMPT_TOKEN_IDS, values[0])
            span.set_attribute(A.COMPLETION_TOKEN_IDS, values[1])
            span.set_attribute(A.COMPLETION_LOGPROBS, values[2])
    return list(memory.get_finished_spans()), pack_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spans", type=int, default=2000)
    parser.add_argument("--prompt", type=int, default=300)
    parser.add_argument("--completion", type=int, default=60)
    args = parser.parse_args()

    results = {}
    for name, packed in (("int arrays", False), ("tokpack", True)):
        spans, pack_s = make_spans(args.spans, args.prompt, args.completion, packed)
        best = float("inf")
        for _ in range(3):  # what an OTLP exporter does per batch: encode, then serialize
            start = time.perf_counter()
            data = encode_spans(spans).SerializeToString()
            best = min(best, time.perf_counter() - start)
        results[name] = ((pack_s + best) / args.spans * 1e6, len(data) / args.spans)

    table = Table(title=f"OTLP encoding per LLM span ({args.prompt} prompt + {args.completion} completion tokens + log-probs, {args.spans} spans)")
    for column in ("token encoding", "pack + encode (us/span)", "bytes/span", "speed-up"):
        table.add_column(column, justify="right")
    base = results["int arrays"][0]
    for name, (us, size) in results.items():
        table.add_row(name, f"{us:.0f}", f"{size:.0f}", f"{base / us:.1f}x")
    Console().print(table)


if __name__ == "__main__":
    main()
