"""Synthetic agent spans made by the real OTel SDK, for load tests, benchmarks and tests.

The spans look like an agent's: every ``llm_every``-th span is an LLM call carrying
prompt/completion token ids and log-probs (plain OTel arrays or the packed ``tokpack:``
strings of :mod:`tracerl.schemas.tokens`), the others are tool/agent steps. Requests are
encoded by the OTLP exporter's own encoder, so they are byte-for-byte what a Python
exporter sends. The same arguments give the same bytes: ids, times, tokens and the
resource's instance id all come from ``seed``, so a failing test or fuzz input reproduces.
"""

from __future__ import annotations

import http.client
import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tracerl.schemas import attributes as A
from tracerl.schemas.tokens import pack_floats, pack_ids


START_UNIX_NANO = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z, the first span's start
STEP_NANO = 1_000_000  # one span per millisecond, each lasting half of it


class _SeededIds(IdGenerator):
    """Trace and span ids from a seeded generator instead of the SDK's random ones."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def generate_span_id(self) -> int:
        return self.rng.getrandbits(64) or 1

    def generate_trace_id(self) -> int:
        return self.rng.getrandbits(128) or 1


def make_spans(
    n: int,
    *,
    packed: bool = True,
    llm_every: int = 4,
    prompt_tokens: int = 300,
    completion_tokens: int = 60,
    seed: int = 0,
    service: str = "loadgen-agent",
    resource: dict | None = None,
) -> Sequence[ReadableSpan]:
    """``n`` finished spans; ``resource`` adds resource attributes (e.g. a peer's routing keys)."""
    rng = random.Random(seed)
    exporter = InMemorySpanExporter()
    resource = Resource.create({A.SERVICE_NAME: service, A.SERVICE_INSTANCE_ID: f"loadgen-{seed}", **(resource or {})})
    provider = TracerProvider(resource=resource, id_generator=_SeededIds(random.Random(f"ids-{seed}")))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("tracerl.loadgen", "1")
    for i in range(n):
        attributes: dict = {A.EPISODE_ID: f"ep-{seed}-{i // 8}", A.TASK_ID: f"task-{i % 50}", A.SPLIT: "train"}
        if i % llm_every == 0:
            prompt = [rng.randrange(50_000) for _ in range(prompt_tokens)]
            completion = [rng.randrange(50_000) for _ in range(completion_tokens)]
            logprobs = [-rng.random() * 5 for _ in range(completion_tokens)]
            attributes |= {
                A.GEN_AI_OPERATION: "chat",
                A.GEN_AI_REQUEST_MODEL: "tiny",
                A.GEN_AI_RESPONSE_ID: f"chatcmpl-{seed}-{i}",
                A.POLICY_VERSION: 3,
                A.PROMPT_TOKEN_IDS: pack_ids(prompt) if packed else prompt,
                A.COMPLETION_TOKEN_IDS: pack_ids(completion) if packed else completion,
                A.COMPLETION_LOGPROBS: pack_floats(logprobs) if packed else logprobs,
            }
            name = "chat tiny"
        else:
            attributes |= {A.GEN_AI_TOOL_NAME: "calculator", "tool.input": f"{i} * 7"}
            name = "execute_tool calculator"
        start = START_UNIX_NANO + i * STEP_NANO
        tracer.start_span(name, attributes=attributes, start_time=start).end(end_time=start + STEP_NANO // 2)
    provider.shutdown()
    return exporter.get_finished_spans()


def encode_batches(spans: Sequence[ReadableSpan], batch_size: int = 512) -> list[bytes]:
    """Serialized ``ExportTraceServiceRequest`` bodies of ``batch_size`` spans each."""
    return [
        encode_spans(spans[i : i + batch_size]).SerializeToString() for i in range(0, len(spans), batch_size)
    ]


@dataclass
class FloodTally:
    """What a :func:`flood` got back: replies by status (-1: connection error) and the bodies acknowledged."""

    replies: dict[int, int] = field(default_factory=dict)
    acknowledged: list[int] = field(default_factory=list)  # indices into the bodies, one per 200
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, status: int, body: int) -> None:
        with self.lock:
            self.replies[status] = self.replies.get(status, 0) + 1
            if status == 200:
                self.acknowledged.append(body)


def flood(port: int, bodies: Sequence[bytes], clients: int, seconds: float, honour_retry_after: bool) -> FloodTally:
    """``clients`` keep-alive connections POSTing OTLP/HTTP ``bodies`` to 127.0.0.1:``port`` for ``seconds``.

    Each client sends its next body as soon as the last is acknowledged; on 429/503 it waits the
    Retry-After when ``honour_retry_after``, else it sends the same body again at once.
    """
    tally = FloodTally()
    stop = time.monotonic() + seconds

    def client(first: int) -> None:
        conn, i = http.client.HTTPConnection("127.0.0.1", port, timeout=30), first
        while time.monotonic() < stop:
            try:
                conn.request("POST", "/v1/traces", body=bodies[i % len(bodies)], headers={"Content-Type": "application/x-protobuf"})
                reply = conn.getresponse()
                reply.read()
            except (OSError, http.client.HTTPException):
                tally.add(-1, i % len(bodies))
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                continue
            tally.add(reply.status, i % len(bodies))
            if reply.status == 200:
                i += clients
            elif honour_retry_after and reply.status in (429, 503):
                time.sleep(min(float(reply.getheader("Retry-After", "1")), max(0.0, stop - time.monotonic())))
        conn.close()

    threads = [threading.Thread(target=client, args=(n,), daemon=True) for n in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return tally
