"""Token ids on spans: plain OTel int arrays vs the packed ``tokpack:`` string.

The OTel SDK validates an array attribute element by element when it is set, and the
OTLP encoder turns every element into its own protobuf ``AnyValue``; the packed form
is one string. Side by side in one run, per LLM-call span with realistic token
counts: the cost of putting the tokens on the span in the agent process (packing
included), the cost of OTLP encoding, and the encoded size. It is why tracerl packs
by default (``TRACERL_TOKEN_ENCODING=array`` keeps plain arrays).

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
    """``n`` finished LLM spans; returns them and the seconds spent putting the tokens
    on them (packing included; the OTel SDK validates array attributes element-wise)."""
    rng = random.Random(0)
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("bench")
    capture_s = 0.0
    for _ in range(n):
        ids = [rng.randrange(150_000) for _ in range(prompt)]
        out = [rng.randrange(150_000) for _ in range(completion)]
        lps = [-rng.random() * 3 for _ in range(completion)]
        with tracer.start_as_current_span("chat m", attributes={A.GEN_AI_OPERATION: A.GEN_AI_CHAT}) as span:
            start = time.perf_counter()
            values = (pack_ids(ids), pack_ids(out), pack_floats(lps)) if packed else (ids, out, lps)
            span.set_attribute(A.PROMPT_TOKEN_IDS, values[0])
            span.set_attribute(A.COMPLETION_TOKEN_IDS, values[1])
            span.set_attribute(A.COMPLETION_LOGPROBS, values[2])
            capture_s += time.perf_counter() - start
    return list(memory.get_finished_spans()), capture_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spans", type=int, default=2000)
    parser.add_argument("--prompt", type=int, default=300)
    parser.add_argument("--completion", type=int, default=60)
    args = parser.parse_args()

    results = {}
    for name, packed in (("int arrays", False), ("tokpack", True)):
        spans, capture_s = make_spans(args.spans, args.prompt, args.completion, packed)
        best = float("inf")
        for _ in range(3):  # what an OTLP exporter does per batch: encode, then serialize
            start = time.perf_counter()
            data = encode_spans(spans).SerializeToString()
            best = min(best, time.perf_counter() - start)
        results[name] = (capture_s / args.spans * 1e6, best / args.spans * 1e6, len(data) / args.spans)

    table = Table(title=f"Token ids per LLM span ({args.prompt} prompt + {args.completion} completion tokens + log-probs, {args.spans} spans)")
    for column in ("token encoding", "on the span, in-process (us)", "OTLP encode (us)", "OTLP bytes", "in-process speed-up", "OTLP speed-up"):
        table.add_column(column, justify="right")
    base_set, base_otlp, _ = results["int arrays"]
    for name, (set_us, otlp_us, size) in results.items():
        table.add_row(name, f"{set_us:.0f}", f"{otlp_us:.0f}", f"{size:.0f}", f"{base_set / set_us:.1f}x", f"{base_otlp / otlp_us:.1f}x")
    Console().print(table)


if __name__ == "__main__":
    main()
