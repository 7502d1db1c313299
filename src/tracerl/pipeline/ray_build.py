"""``pipeline build-dataset --engine ray``: the same dataset, built in buckets on a Ray cluster.

The build is the one-machine build run once per bucket (:mod:`tracerl.pipeline.buckets` says
what a bucket is and why nothing crosses one): every stage is the same DuckDB code, each bucket
in a Ray task on one CPU with its own connection. Three steps, all from the driver:

1. **plan**: Ray tasks read the span files a chunk at a time, as ``normalize`` reads them, for
   the ids that link traces; the driver joins them into components and deals them out to buckets
   (``--buckets``, default: the cluster's CPUs). The plan travels in Ray's object store, one copy
   per node.
2. **buckets**: a task per bucket reads the files that hold its traces, keeps its own rows of
   every input and writes its transitions into a staging folder of its own beside the dataset
   (``.OUT.ray-<id>/<bucket>/``), emptied when the task starts: a retried task (Ray retries one
   whose worker died) starts from nothing, and a task that failed leaves nothing the dataset sees.
3. **commit**: once every bucket has succeeded, the driver moves their files into OUT (names are
   unique), adds their counts into one manifest and writes the exports; a build that failed leaves
   OUT as it was.

OUT (and the span files) must be reachable by path from every node: a shared filesystem, as
for any Ray job writing files. ``--advantage batch`` compares every episode of the build with
one baseline, which no bucket holds: it is refused (build on one machine, or use a group
advantage).
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa

from tracerl.core.extras import missing_message
from tracerl.pipeline import buckets, build_output, log_content, normalize, source
from tracerl.pipeline.build import Progress, Written, _noop, connect, finish, inputs, reading_spans, write_transitions
from tracerl.pipeline.counts import summed
from tracerl.pipeline.options import BuildOptions
from tracerl.pipeline.retokenize import Retokenizer
from tracerl.pipeline.source import PipelineInputError
from tracerl.schemas import environment as E

BUCKET_RETRIES = 3  # a bucket whose worker died (or that hit an OSError) is run again this many times


def _ray():
    problem = missing_message("ray", "--engine ray")
    if problem:
        raise PipelineInputError(problem)
    import ray

    return ray


def _subset(files: source.SpanFiles, names: list[str]) -> source.SpanFiles:
    """The listing with only the span files ``names`` (in the listing's order); the other inputs whole."""
    wanted = set(names)
    return replace(files, files=[f for f in files.files if f in wanted])


def _keys(files: source.SpanFiles, offset: int, memory_limit: str) -> tuple[pa.Table, pa.Table]:
    """The plan's reading of a chunk of span files (the listing's from ``offset`` on): the ids each trace
    names, and the files each trace lies in."""
    con = connect(1, memory_limit)
    try:
        with reading_spans("nothing was written"):
            source.register_raw_spans(con, files)
            log_content.build_log_content(con, [])  # ids are all the plan reads: the message content is not needed
            normalize.build_span_meta(con)
            return buckets.keys_of_spans(con, offset), buckets.files_of_traces(con)
    finally:
        con.close()


def _build_bucket(files: source.SpanFiles, opts: BuildOptions, index: int, plan: pa.Table, clock_ns: int | None,
                  into: str, processed_from: str | None) -> Written:
    """Bucket ``index``'s build into its own staging folder, emptied first (a retry starts from nothing)."""
    folder = Path(into)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    retokenizer = Retokenizer(opts.retokenize) if opts.retokenize else None
    return write_transitions(files, folder, opts, processed_from=Path(processed_from) if processed_from else None,
                             retokenizer=retokenizer, bucket=buckets.Bucket(index=index, keys=plan, clock_ns=clock_ns))


def _wait(ray, refs: list, progress: Progress, what: str) -> list:
    """Every task's result in order, reporting each that ends; the first failure cancels the rest and is raised."""
    pending = list(refs)
    results = {}
    while pending:
        ready, pending = ray.wait(pending, num_returns=1)
        try:
            results[ready[0]] = ray.get(ready[0])
        except Exception as exc:
            for ref in pending:
                ray.cancel(ref, force=True)
            if isinstance(exc, ray.exceptions.RayTaskError) and isinstance(exc.cause, PipelineInputError):
                raise exc.cause from None  # the input's fault, said as the one-process build says it
            raise
        progress(f"{what} {len(results)}/{len(refs)}", None)
    return [results[ref] for ref in refs]


def build_dataset_on_ray(
    spans: str | os.PathLike, out: str | os.PathLike, *, address: str | None = None, buckets_count: int | None = None,
    progress: Progress | None = None, on_rows: Callable[[int], None] | None = None, **options: Any,
) -> dict[str, Any]:
    """Build the dataset of ``spans`` into ``out`` on Ray (``address``, else ``$RAY_ADDRESS``, else a local Ray).

    Same rows and counts as :func:`tracerl.pipeline.build_dataset` (``options`` are the fields of
    :class:`BuildOptions`); the manifest says the engine and how many buckets.
    """
    ray = _ray()
    opts = BuildOptions(**options)
    if opts.advantage == "batch":
        raise PipelineInputError("--advantage batch compares every episode of a build with one baseline, which no bucket "
                                 "holds: build on one machine (--engine duckdb) or use a group advantage (grpo, rloo)")
    progress = progress or _noop
    out_dir = Path(out).absolute()
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.time()
    previous = set(build_output.transition_files(out_dir))
    if opts.retokenize:
        Retokenizer(opts.retokenize)  # a bad folder fails here, before any work
    files = source.find_span_files(spans)
    if not ray.is_initialized():
        os.environ.setdefault(E.RAY_ACCEL_OVERRIDE_ENV, "0")
        ray.init(address=address or os.environ.get(E.RAY_ADDRESS_ENV) or None,  # an empty variable is no address
                 include_dashboard=False, log_to_driver=False)
    count = buckets_count or max(1, int(ray.cluster_resources().get("CPU", 1)))
    worker_opts = replace(opts, threads=1)

    progress(f"planning {count} bucket(s) over {len(files.files)} span file(s)", None)
    chunk = max(1, -(-len(files.files) // (2 * count)))
    keys_task = ray.remote(num_cpus=1, max_retries=BUCKET_RETRIES)(_keys)
    found = _wait(ray, [keys_task.remote(_subset(files, files.files[i:i + chunk]), i, opts.memory_limit)
                        for i in range(0, len(files.files), chunk)], progress, "planned chunk")
    plan = buckets.plan([keys for keys, _ in found], count, [where for _, where in found])
    plan_ref = ray.put(plan.keys)

    staging = out_dir.parent / f".{out_dir.name}.ray-{uuid.uuid4().hex[:12]}"
    bucket_task = ray.remote(num_cpus=1, max_retries=BUCKET_RETRIES, retry_exceptions=[OSError])(_build_bucket)
    try:
        refs = [
            bucket_task.remote(
                # bucket 0 also takes the inputs that name no trace, and must run even when it holds no span file
                _subset(files, plan.files[i]), worker_opts, i, plan_ref, plan.clock_ns, str(staging / str(i)),
                str(out_dir) if opts.incremental else None,
            )
            for i in range(count)
        ]
        parts: list[Written] = _wait(ray, refs, progress, "built bucket")
        paths = []
        for part in parts:
            for path in part.paths:
                target = out_dir / Path(path).name
                os.replace(path, target)
                paths.append(str(target))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    rows = sum(part.counts["rows_written"] for part in parts)
    if on_rows:
        on_rows(rows)
    counts = summed([part.counts for part in parts])
    # what every bucket saw whole, counted once: the files listed, and the episodes already in the dataset
    counts.update(source.counts(files))
    counts["judgments"]["files"] = parts[0].counts["judgments"]["files"]
    counts["episodes"]["already_processed"] = build_output.episode_count(sorted(previous)) if opts.incremental else 0
    written = Written(paths=paths, counts=counts, inputs=inputs(files, opts), rules=parts[0].rules, clock_ns=plan.clock_ns)
    if not opts.incremental:
        build_output.clear_previous(out_dir, previous)
    return finish(out_dir, opts, written, started, progress,
                  engine={"name": "ray", "buckets": count, "spans_per_bucket": plan.spans,
                          "span_files_per_bucket": [len(f) for f in plan.files]})
