"""Fuzz the collector's C wire decoder with a sanitizer build of it (started by ``run.sh``).

``run.sh`` compiles ``src/tracerl/collector/otlp_wire.c`` with ``-fsanitize=address,undefined`` and runs
this file with the sanitizer runtimes preloaded. It puts that build in the place of the
installed extension (``tracerl.collector._otlp_wire``) before anything imports the
collector, checks that the collector's column builder holds it, and then either:

* ``--pytest ARGS``: runs pytest in this process (the decoder's differential tests), or
* ``--bodies N``: decodes N seeded mutations of valid and edge-case OTLP trace requests,
  and sends every body the decoder and protobuf both accept through the collector's own
  conversion (``TRACES.table.build``: the column builder, ``promote_columns``, list columns,
  and the row path for a span whose values the table cannot hold).

A sanitizer report aborts the process; any exception but the decoder's ``ValueError`` (its
documented "not mine, let protobuf read it") fails the run with the seed and body index.
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import sys
import time
from pathlib import Path
from types import ModuleType

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tracerl_testing.loadgen import encode_batches, make_spans
from tracerl_testing.otlp_requests import random_request

# tracerl.collector.columns (and service, which imports it) is imported only after install():
# it binds the extension when it is first imported.
EXTENSION = "tracerl.collector._otlp_wire"

# Values that land on the edges of varints and lengths when written over a byte.
EDGES = [b"\x00", b"\x01", b"\x7f", b"\x80", b"\xff", b"\x80\x01", b"\xff\x7f", b"\xff\xff\xff\xff\x0f",
         b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", b"\xff" * 10, b"\x80" * 10 + b"\x00"]


def install(path: Path) -> ModuleType:
    """Load the extension built at ``path`` as ``tracerl.collector._otlp_wire``."""
    import tracerl.collector

    spec = importlib.util.spec_from_file_location(EXTENSION, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[EXTENSION] = module
    tracerl.collector._otlp_wire = module
    from tracerl.collector import columns

    if columns._otlp_wire is not module:
        raise SystemExit(f"the collector did not pick up {path}: {columns._otlp_wire!r}")
    return module


def sanitized() -> bool:
    """Whether ASan's runtime is loaded in this process (what run.sh arranges)."""
    return any("libasan" in line for line in Path("/proc/self/maps").read_text().splitlines())


def corpus() -> list[bytes]:
    """Valid requests as the Python exporter sends them (packed and plain token arrays, short
    and long), and seeded edge-case requests (every value shape, invalid ids, corrupt tokens)."""
    bodies = [
        encode_batches(make_spans(6, llm_every=2, seed=seed, prompt_tokens=5, completion_tokens=3, packed=packed))[0]
        for seed in range(4) for packed in (True, False)
    ]
    bodies += [encode_batches(make_spans(2, llm_every=1, seed=9, packed=packed))[0] for packed in (True, False)]
    bodies += [random_request(seed).SerializeToString() for seed in range(64)]
    return [body for body in bodies if body]


def mutate(body: bytes, bodies: list[bytes], rng: random.Random) -> bytes:
    """One byte-level edit (up to four, less often), the kinds a coverage-blind fuzzer gets furthest with on
    protobuf: set or flip bytes, cut, insert, delete or copy runs, write varint edges, splice."""
    data = bytearray(body)
    for _ in range(1 if rng.random() < 0.6 else rng.randint(2, 4)):  # mostly one: more bodies get deep
        n = len(data)
        op = rng.randrange(8)
        if op == 0 and n:
            data[rng.randrange(n)] = rng.randrange(256)
        elif op == 1 and n:
            data[rng.randrange(n)] ^= 1 << rng.randrange(8)
        elif op == 2:
            del data[rng.randrange(n + 1):]
        elif op == 3:
            at = rng.randrange(n + 1)
            data[at:at] = rng.randbytes(rng.randint(1, 8))
        elif op == 4 and n:
            at = rng.randrange(n)
            del data[at : at + rng.randint(1, 16)]
        elif op == 5 and n:
            start, at = rng.randrange(n), rng.randrange(n + 1)
            data[at:at] = data[start : start + rng.randint(1, 64)]
        elif op == 6 and n:
            at = rng.randrange(n)
            data[at : at + 1] = rng.choice(EDGES)
        elif op == 7:
            other = rng.choice(bodies)
            data = data[: rng.randrange(n + 1)] + other[rng.randrange(len(other) + 1):]
    return bytes(data)


def fuzz(module: ModuleType, count: int, seed: int) -> None:
    from tracerl.collector.columns import PACKED_TOKENS
    from tracerl.collector.service import TRACES

    bodies = corpus()
    rng = random.Random(seed)
    declined = decoded = refused_by_protobuf = tables = 0
    started = time.monotonic()
    for index in range(count):
        if index and index % 500_000 == 0:
            print(f"  {index:,} bodies, {time.monotonic() - started:.0f} s", flush=True)
        body = mutate(rng.choice(bodies), bodies, rng)
        try:
            try:
                module.decode_trace_request(body, PACKED_TOKENS)
            except ValueError:
                declined += 1
                continue
            decoded += 1
            try:
                request = ExportTraceServiceRequest.FromString(body)
            except DecodeError:  # the collector answers 400 before its decoder sees the body
                refused_by_protobuf += 1
                continue
            TRACES.table.build(request, body)
            tables += 1
        except Exception:
            print(f"body {index} of seed {seed} ({len(body)} bytes): {body.hex()}", file=sys.stderr)
            raise
    print(f"{count:,} mutated bodies (seed {seed}, corpus of {len(bodies)} requests) in "
          f"{time.monotonic() - started:.0f} s: {declined:,} declined by the decoder (ValueError), "
          f"{decoded:,} decoded, of which {refused_by_protobuf:,} refused by protobuf and {tables:,} "
          f"built into spans tables; {'no sanitizer report' if sanitized() else 'NOT a sanitizer run: memory errors went unseen'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--module", type=Path, required=True, help="the sanitizer build of _otlp_wire")
    parser.add_argument("--bodies", type=int, default=0, help="mutated bodies to decode")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pytest", nargs=argparse.REMAINDER, help="run pytest with these arguments instead")
    args = parser.parse_args()
    module = install(args.module)
    print(f"{EXTENSION} is {module.__file__}")
    if args.pytest is not None:
        import pytest

        raise SystemExit(pytest.main(args.pytest))
    fuzz(module, args.bodies, args.seed)


if __name__ == "__main__":
    main()
