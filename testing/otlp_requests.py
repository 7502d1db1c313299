"""Seeded random OTLP trace requests that exercise every value shape the OTLP protocol allows,
for differential tests of the collector's two readers and for fuzzing its C wire decoder."""

from __future__ import annotations

import math
import random

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue, KeyValueList

from tracerl.schemas import attributes as A
from tracerl.schemas.tokens import pack_floats, pack_ids


def _value(rng: random.Random, depth: int = 0) -> AnyValue:
    kind = rng.choice(["s", "i", "d", "b", "bytes", "empty", "array", "kvlist"] if depth < 3 else ["s", "i", "d"])
    if kind == "s":
        return AnyValue(string_value=rng.choice(["", "x", "héllo ✓", 'quote " and \\', "\x00ctl", "long" * 50]))
    if kind == "i":
        return AnyValue(int_value=rng.choice([0, -1, 2**63 - 1, -(2**63), rng.randrange(-1000, 1000)]))
    if kind == "d":
        return AnyValue(double_value=rng.choice([0.0, -0.0, 1e16, 1.5e-300, math.inf, -math.inf, math.nan, rng.random()]))
    if kind == "b":
        return AnyValue(bool_value=rng.random() < 0.5)
    if kind == "bytes":
        return AnyValue(bytes_value=bytes(rng.randrange(256) for _ in range(rng.randrange(5))))
    if kind == "empty":
        return AnyValue()
    if kind == "array":
        return AnyValue(array_value=ArrayValue(values=[_value(rng, depth + 1) for _ in range(rng.randrange(4))]))
    return AnyValue(kvlist_value=KeyValueList(values=_attributes(rng, depth + 1, 3)))


def _attributes(rng: random.Random, depth: int, most: int) -> list[KeyValue]:
    keys = ["k", "é", "tool.input", A.EPISODE_ID, A.AGENT_NAME, A.GEN_AI_AGENT_NAME, A.POLICY_VERSION, A.REWARD_VALUE]
    return [KeyValue(key=rng.choice(keys), value=_value(rng, depth)) for _ in range(rng.randrange(most + 1))]


def _token_attribute(rng: random.Random) -> KeyValue:
    """A token attribute, valid (packed or plain, empty too) or corrupt."""
    key = rng.choice([A.PROMPT_TOKEN_IDS, A.COMPLETION_TOKEN_IDS, A.COMPLETION_LOGPROBS])
    floats = key == A.COMPLETION_LOGPROBS
    n = rng.choice([0, 1, 7])
    form = rng.choice(["packed", "plain", "corrupt", "wrong type"])
    if form == "packed":
        value = AnyValue(string_value=pack_floats([-rng.random() for _ in range(n)]) if floats else pack_ids(range(n)))
    elif form == "plain":
        items = [AnyValue(double_value=-rng.random()) if floats else AnyValue(int_value=rng.randrange(2**31)) for _ in range(n)]
        value = AnyValue(array_value=ArrayValue(values=items))
    elif form == "corrupt":
        value = AnyValue(string_value=rng.choice(["tokpack:i4:AAA", "tokpack:x9:AAAA", "nope"]))
    else:
        value = AnyValue(string_value=pack_ids([1]) if floats else pack_floats([0.5]))
    return KeyValue(key=key, value=value)


def random_request(seed: int) -> ExportTraceServiceRequest:
    """Several resources and scopes, empty scopes, events, links, bytes, nested kvlists/arrays,
    empty AnyValues, NaN/+-inf/1e16, unicode and control characters, duplicate keys, both
    agent-name keys, invalid ids, valid packed/plain/empty token arrays, corrupt and mistyped
    packed tokens; the same ``seed``, the same request."""
    rng = random.Random(seed)
    request = ExportTraceServiceRequest()
    for r in range(rng.randrange(1, 4)):
        group = request.resource_spans.add()
        if rng.random() < 0.8:
            group.resource.attributes.add(key="service.name", value=AnyValue(string_value=f"svc-{r}"))
        group.resource.attributes.extend(_attributes(rng, 1, 2))
        for s in range(rng.randrange(0, 3)):
            scoped = group.scope_spans.add()
            if rng.random() < 0.7:
                scoped.scope.name, scoped.scope.version = f"scope-{s}", rng.choice(["", "1.0"])
            for i in range(rng.randrange(0, 12)):
                span = scoped.spans.add(
                    trace_id=rng.choice([rng.randbytes(16)] * 9 + [b"\x00" * 16, b"\x01"]),
                    span_id=rng.choice([rng.randbytes(8)] * 9 + [b"", b"\x02" * 3]),
                    parent_span_id=rng.choice([b"", rng.randbytes(8)]),
                    name=rng.choice(["chat m", "execute_tool calc", "", "ünïcode"]),
                    kind=rng.choice([0, 1, 2, 3, 4, 5, 17]),
                    start_time_unix_nano=rng.randrange(2**62),
                    end_time_unix_nano=rng.randrange(2**62),
                )
                span.status.code = rng.choice([0, 1, 2, 9])
                span.status.message = rng.choice(["", "boom"])
                span.attributes.extend(_attributes(rng, 0, 6))
                if rng.random() < 0.4:
                    span.attributes.append(_token_attribute(rng))
                for _ in range(rng.choice([0, 0, 1, 2])):
                    span.events.add(name="gen_ai.choice", time_unix_nano=rng.randrange(2**40)).attributes.extend(
                        _attributes(rng, 1, 3))
                for _ in range(rng.choice([0, 0, 1])):
                    span.links.add(trace_id=rng.randbytes(16), span_id=rng.randbytes(8)).attributes.extend(
                        _attributes(rng, 1, 2))
    return request
