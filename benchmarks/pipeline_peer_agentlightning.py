"""The peer side of benchmarks/pipeline_build.py: agentlightning's span-to-triplet adapter.

Runs inside a virtual environment that has ``agentlightning`` (never tracerl's): reads
spans as JSON lines (the shape agentlightning's store keeps them in), rebuilds its
``Span`` objects one rollout at a time and runs ``TracerTraceToTriplet().adapt`` on
them, as its trainer does. Prints one JSON object with the timings: ``seconds`` is all of
that work, from opening the file to the last triplet (imports excluded, as on tracerl's side),
split into ``read_s`` (JSON lines), ``load_s`` (``Span`` objects) and ``adapt_s``.

    LITELLM_LOCAL_MODEL_COST_MAP=True /path/to/aglvenv/bin/python pipeline_peer_agentlightning.py SPANS.jsonl
"""

from __future__ import annotations

import json
import resource
import sys
import time
from collections import defaultdict


def main() -> None:
    from agentlightning import __version__
    from agentlightning.adapter import TracerTraceToTriplet
    from agentlightning.types import Span

    started_work = time.perf_counter()
    by_rollout: dict[str, list[dict]] = defaultdict(list)
    with open(sys.argv[1]) as handle:
        for line in handle:
            record = json.loads(line)
            by_rollout[record["rollout_id"]].append(record)
    read_s = time.perf_counter() - started_work
    adapter = TracerTraceToTriplet()
    load_s = adapt_s = 0.0
    triplets = rewarded = spans = 0
    for records in by_rollout.values():
        started = time.perf_counter()
        objects = [Span.model_validate(r) for r in records]
        load_s += time.perf_counter() - started
        started = time.perf_counter()
        result = adapter.adapt(objects)
        adapt_s += time.perf_counter() - started
        spans += len(objects)
        triplets += len(result)
        rewarded += sum(1 for t in result if t.reward is not None)
    seconds = time.perf_counter() - started_work
    print(json.dumps({
        "version": __version__, "rollouts": len(by_rollout), "spans": spans, "triplets": triplets,
        "rewarded_triplets": rewarded, "seconds": seconds, "read_s": read_s, "load_s": load_s, "adapt_s": adapt_s,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }))


if __name__ == "__main__":
    main()
