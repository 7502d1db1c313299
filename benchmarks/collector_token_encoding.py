"""Token ids on the wire: plain OTel int arrays vs packed ``tokpack:`` strings.

Token ids dominate an LLM call span. For each encoding this measures, on the same LLM
call spans (``--prompt`` + ``--completion`` token ids and the completion log-probs):

* client: the OTLP exporter's own encoder (``encode_spans`` + serialize), spans/s;
* wire: bytes per span, raw and gzip;
* collector: parse + conversion to rows + Arrow table (what ``tracerl collector`` does
  per request before the WAL), spans/s;

and checks that both decode to exactly the original arrays. Usage::

    python benchmarks/collector_token_encoding.py
"""

from __future__ import annotations

import argparse
import gzip
import time
from collections.abc import Callable

import numpy as np
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tracerl.collector.otlp import trace_rows
from tracerl.collector.service import TRACES
from tracerl.schemas import attributes as A
from tracerl.schemas.tokens import decode
from tracerl_testing.loadgen import make_spans


def best_rate(work: Callable[[], object], items: int, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - started)
    return items / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--spans", type=int, default=512, help="LLM call spans per request")
    parser.add_argument("--prompt", type=int, default=300)
    parser.add_argument("--completion", type=int, default=60)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    print(f"{args.spans} LLM call spans per request, {args.prompt} prompt + {args.completion} completion token ids "
          f"+ {args.completion} log-probs each; best of {args.repeat}")
    print(f"{'encoding':12s} {'client encode spans/s':>22s} {'B/span':>8s} {'B/span gzip':>12s} {'collector spans/s':>18s}")
    figures = {}
    for name, packed in (("int arrays", False), ("tokpack", True)):
        spans = make_spans(args.spans, packed=packed, llm_every=1, prompt_tokens=args.prompt,
                           completion_tokens=args.completion, seed=1)
        body = encode_spans(spans).SerializeToString()
        encode = best_rate(lambda: encode_spans(spans).SerializeToString(), len(spans), args.repeat)

        def collect() -> None:
            TRACES.table.build(ExportTraceServiceRequest.FromString(body), body)  # what the collector runs

        collector = best_rate(collect, len(spans), args.repeat)
        rows = trace_rows(ExportTraceServiceRequest.FromString(body)).rows
        for span, row in zip(spans, rows, strict=True):  # lossless, both ways
            assert list(row["prompt_token_ids"]) == decode(span.attributes[A.PROMPT_TOKEN_IDS])
            assert list(row["completion_token_ids"]) == decode(span.attributes[A.COMPLETION_TOKEN_IDS])
            expected = np.asarray(decode(span.attributes[A.COMPLETION_LOGPROBS]), dtype=np.float32)
            assert np.array_equal(row["completion_logprobs"], expected)
        figures[name] = (encode, len(body) / len(spans), len(gzip.compress(body)) / len(spans), collector)
        print(f"{name:12s} {encode:22,.0f} {figures[name][1]:8.0f} {figures[name][2]:12.0f} {collector:18,.0f}")
    plain, packed = figures["int arrays"], figures["tokpack"]
    print(f"{'tokpack/int':12s} {packed[0] / plain[0]:21.1f}x {packed[1] / plain[1]:7.2f}x {packed[2] / plain[2]:11.2f}x "
          f"{packed[3] / plain[3]:17.1f}x")
    print("both encodings decoded to exactly the original token ids and float32 log-probs")


if __name__ == "__main__":
    main()
