"""Benchmark: spans -> training dataset, tracerl vs agentlightning's span-to-triplet adapter.

Both sides run in a child process pinned to 2 CPUs and are measured the same way:

- *work s*: the time of the work itself, inside the process, after its imports: for
  tracerl ``build_dataset`` (read the span Parquet, build, write the dataset); for the
  peer, reading its span JSON lines, rebuilding its ``Span`` objects and
  ``TracerTraceToTriplet().adapt`` per rollout, as its trainer does;
- *process s*: the child's wall time from start to exit, start-up and imports included;
- *peak MiB*: the child's peak RSS.

The peer, agentlightning 0.3.0, lives in a virtual environment of its own (``--peer-python``
or ``$TRACERL_AGL_PYTHON``; the script says so and measures tracerl alone when there is
none). It runs on the first ``--peer-episodes`` episodes of the span set, and so does
tracerl, a second time: that row pair compares like with like (time, memory and the number
of transitions, which must agree). The peer's time at full size is extrapolated linearly
from its run, and shown as such; its memory is not extrapolated. The peer does strictly
less work (no Parquet read or write, no rewards beyond one per call, no advantages).

    python benchmarks/pipeline_build.py                       # 100,000 episodes, 1,000,000 spans
    python benchmarks/pipeline_build.py --episodes 2000 --peer-episodes 500   # a quick look
    python benchmarks/pipeline_build.py --engine ray --workers 1 2            # beside builds on a local Ray

With ``--engine ray`` the peer is left out: the same span set is built by the one-process build
and by ``build_dataset_on_ray`` on a local Ray of each ``--workers`` count (as many buckets),
every child pinned to the same 2 CPUs (Ray's workers inherit the pinning). Their peak MiB is the
driver's alone; the workers' memory is not counted.

Span sets are generated once (tracerl_testing.synthetic_spans) and cached under ``--data``
(default ``/tmp/tracerl-bench/spans-<episodes>``, the subset beside it).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq

from tracerl.schemas import attributes as A
from tracerl_testing.synthetic_spans import episode_id, generate, write

HERE = Path(__file__).resolve().parent
CPUS = 2

OURS = """
import json, sys, time
from tracerl.pipeline import build_dataset
started = time.perf_counter()
manifest = build_dataset(sys.argv[1], sys.argv[2], threads={cpus})
print(json.dumps({{"seconds": time.perf_counter() - started, "transitions": manifest["counts"]["rows_written"],
                  "warnings": manifest["warnings"]}}))
"""


ON_RAY = """
import json, os, sys, time
from tracerl.schemas import environment as E
os.environ.setdefault(E.RAY_ACCEL_OVERRIDE_ENV, "0")
import ray
from tracerl.pipeline.ray_build import build_dataset_on_ray
ray.init(num_cpus={workers}, include_dashboard=False, log_to_driver=False)
started = time.perf_counter()
manifest = build_dataset_on_ray(sys.argv[1], sys.argv[2], buckets_count={workers})
print(json.dumps({{"seconds": time.perf_counter() - started, "transitions": manifest["counts"]["rows_written"],
                  "warnings": manifest["warnings"]}}))
"""


@dataclass
class Run:
    """One child process: what it printed last (JSON), and how it ran."""

    result: dict
    process_s: float
    peak_mib: float


def _pin() -> None:
    if hasattr(os, "sched_setaffinity") and len(os.sched_getaffinity(0)) > CPUS:
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:CPUS])


def run_child(argv: list[str], env: dict | None = None) -> Run:
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        started = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=err, text=True, env=env, preexec_fn=_pin)
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own peak RSS
        wall = time.perf_counter() - started
        out.seek(0), err.seek(0)
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"{argv[0]} failed ({os.waitstatus_to_exitcode(status)}):\n{err.read()[-3000:]}")
        return Run(json.loads(out.read().strip().splitlines()[-1]), wall, usage.ru_maxrss / 1024)


def span_set(episodes: int, data: Path) -> Path:
    if not (data / "spans").is_dir():
        print(f"generating {episodes} episodes -> {data} (once)", flush=True)
        tmp = data.with_name(data.name + ".partial")
        shutil.rmtree(tmp, ignore_errors=True)
        chunk = 20_000  # episodes per generated chunk keeps the generator's memory flat
        for first in range(0, episodes, chunk):
            table = generate(min(chunk, episodes - first), first=first, seed=first)
            write(table, tmp, prefix=f"spans-{first // chunk:04d}")
        tmp.rename(data)
    return data


def subset(data: Path, episodes: int) -> Path:
    """The spans of the first ``episodes`` episodes of ``data``, as a data dir of their own (cached beside it)."""
    target = data.with_name(f"{data.name}-first-{episodes}")
    if not (target / "spans").is_dir():
        tmp = target.with_name(target.name + ".partial")
        shutil.rmtree(tmp, ignore_errors=True)
        for i, file in enumerate(sorted((data / "spans").rglob("*.parquet"))):
            table = pq.read_table(file)
            kept = table.filter(pc.less(table.column("episode_id"), episode_id(episodes)))
            if kept.num_rows:
                write(kept, tmp, prefix=f"spans-{i:05d}")
        tmp.rename(target)
    return target


def span_count(data: Path) -> int:
    return sum(pq.ParquetFile(f).metadata.num_rows for f in (data / "spans").rglob("*.parquet"))


def peer_jsonl(data: Path, target: Path) -> int:
    """The spans of ``data`` as agentlightning ``Span`` JSON lines (the shape its store keeps)."""
    written = 0
    with open(target, "w") as handle:
        for file in sorted((data / "spans").rglob("*.parquet")):
            for row in pq.read_table(file).to_pylist():
                handle.write(json.dumps(_agl_span(row)) + "\n")
                written += 1
    return written


def _agl_span(row: dict) -> dict:
    attrs = json.loads(row["attributes"] or "{}")
    name = row["name"]
    out: dict = {}
    if row["completion_token_ids"] is not None:
        name = "openai.chat.completion"  # what the peer matches LLM calls by
        # agentlightning's own token attributes (its patched agentops writes them)
        out = {"prompt_token_ids": row["prompt_token_ids"], "response_token_ids": row["completion_token_ids"],
               A.GEN_AI_RESPONSE_ID: row["response_id"], f"{A.OPENLLMETRY_PROMPTS}.0.role": "user",
               f"{A.OPENLLMETRY_PROMPTS}.0.content": attrs.get(A.GEN_AI_INPUT_MESSAGES, ""),
               f"{A.OPENLLMETRY_COMPLETIONS}.0.role": "assistant",
               f"{A.OPENLLMETRY_COMPLETIONS}.0.content": attrs.get(A.GEN_AI_OUTPUT_MESSAGES, "")}
    elif row["name"] == A.REWARD_SPAN_NAME:  # what agentlightning 0.3's emit_reward writes
        name = "agentlightning.annotation"
        out = {"agentlightning.reward.0.name": "primary", "agentlightning.reward.0.value": row["reward_value"]}
    elif row["agent_name"]:
        out = {"agent.name": row["agent_name"]}
    context = {"trace_id": row["trace_id"], "span_id": row["span_id"], "is_remote": False, "trace_state": {}}
    return {
        "rollout_id": row["episode_id"], "attempt_id": "a0", "sequence_id": 0,
        "trace_id": row["trace_id"], "span_id": row["span_id"], "parent_id": row["parent_span_id"], "name": name,
        "status": {"status_code": "OK" if row["status_code"] != "ERROR" else "ERROR"},
        "attributes": out, "events": [], "links": [],
        "start_time": row["start_time_unix_nano"] / 1e9, "end_time": row["end_time_unix_nano"] / 1e9,
        "context": context, "parent": None, "resource": {"attributes": {}, "schema_url": ""},
    }


def ours(data: Path, ray_workers: int | None = None) -> Run:
    """The one-process build of ``data`` in a child, or with ``ray_workers`` the build on a local Ray of that many CPUs."""
    code = OURS.format(cpus=CPUS) if ray_workers is None else ON_RAY.format(workers=ray_workers)
    with tempfile.TemporaryDirectory(prefix="tracerl-bench-out-") as out:
        return run_child([sys.executable, "-c", code, str(data), out])


def peer(data: Path, python: str) -> Run:
    with tempfile.TemporaryDirectory(prefix="tracerl-bench-peer-") as tmp:
        jsonl = Path(tmp) / "spans.jsonl"
        peer_jsonl(data, jsonl)
        env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}  # else its import fetches a price list
        return run_child([python, str(HERE / "pipeline_peer_agentlightning.py"), str(jsonl)], env)


def _row(label: str, episodes: int, spans: int, transitions: str, work: float, process: str, peak: str) -> str:
    return f"{label:44}{episodes:>9,}{spans:>11,}{transitions:>13}{work:>9.1f}{process:>11}{peak:>10}{spans / work:>12,.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=100_000)
    parser.add_argument("--peer-episodes", type=int, default=5_000)
    parser.add_argument("--data", type=Path)
    parser.add_argument("--peer-python", default=os.environ.get("TRACERL_AGL_PYTHON"),
                        help="python of a venv with agentlightning==0.3.0 (default $TRACERL_AGL_PYTHON)")
    parser.add_argument("--engine", choices=("duckdb", "ray"), default="duckdb",
                        help="ray: the one-process build beside builds on a local Ray (no peer)")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="--engine ray: the local Ray's CPUs, one run each")
    args = parser.parse_args()
    if args.engine == "ray":
        compare_ray(args)
        return
    data = span_set(args.episodes, args.data or Path(tempfile.gettempdir()) / "tracerl-bench" / f"spans-{args.episodes}")
    small = subset(data, min(args.peer_episodes, args.episodes))
    spans, small_spans = span_count(data), span_count(small)
    load = os.getloadavg()[0]
    full, part = ours(data), ours(small)
    has_peer = bool(args.peer_python) and Path(args.peer_python).exists()
    theirs = peer(small, args.peer_python) if has_peer else None

    print(f"\nspans -> dataset, {CPUS} CPUs (load average {load:.1f} at the start: other work on the machine slows both sides)")
    print(f"{'':44}{'episodes':>9}{'spans':>11}{'transitions':>13}{'work s':>9}{'process s':>11}{'peak MiB':>10}{'spans/s':>12}")
    for label, run, episodes, n in (("tracerl build_dataset", full, args.episodes, spans),
                                    ("tracerl build_dataset", part, min(args.peer_episodes, args.episodes), small_spans)):
        print(_row(label, episodes, n, f"{run.result['transitions']:,}", run.result["seconds"],
                   f"{run.process_s:.1f}", f"{run.peak_mib:.0f}"))
    if theirs is None:
        print(f"\npeer missing: no agentlightning venv (--peer-python or $TRACERL_AGL_PYTHON; make one with "
              "python3 -m venv V && V/bin/pip install torch==2.13.0 agentlightning==0.3.0)")
        return
    t = theirs.result
    label = f"agentlightning {t['version']} TracerTraceToTriplet"
    print(_row(label, t["rollouts"], t["spans"], f"{t['triplets']:,}", t["seconds"], f"{theirs.process_s:.1f}",
               f"{theirs.peak_mib:.0f}"))
    scale = spans / t["spans"]
    print(_row(f"  same, extrapolated x{scale:.0f} (time only)", args.episodes, spans, "", t["seconds"] * scale, "", ""))
    same = t["triplets"] == part.result["transitions"]
    print(f"\ntransitions on the same {t['rollouts']:,} episodes: tracerl {part.result['transitions']:,}, "
          f"agentlightning {t['triplets']:,} triplets ({t['rewarded_triplets']:,} with a reward)"
          + ("" if same else "  <- DIFFERENT: the comparison below is not like with like"))
    print(f"speed-up, work s: {t['seconds'] / part.result['seconds']:.0f}x on the same {t['rollouts']:,} episodes, "
          f"{t['seconds'] * scale / full.result['seconds']:.0f}x at {args.episodes:,} (peer extrapolated); "
          f"peak memory on the same episodes: {part.peak_mib:.0f} vs {theirs.peak_mib:.0f} MiB")
    print(f"peer's work split: {t['read_s']:.1f} s reading JSON, {t['load_s']:.1f} s Span objects, {t['adapt_s']:.1f} s adapt")


def compare_ray(args: argparse.Namespace) -> None:
    data = span_set(args.episodes, args.data or Path(tempfile.gettempdir()) / "tracerl-bench" / f"spans-{args.episodes}")
    spans = span_count(data)
    load = os.getloadavg()[0]
    runs = [("tracerl build_dataset (one process)", ours(data))]
    runs += [(f"tracerl on Ray, {w} worker(s)", ours(data, ray_workers=w)) for w in args.workers]
    print(f"\nspans -> dataset, {CPUS} CPUs (load average {load:.1f} at the start)")
    print(f"{'':44}{'episodes':>9}{'spans':>11}{'transitions':>13}{'work s':>9}{'process s':>11}{'peak MiB':>10}{'spans/s':>12}")
    for label, run in runs:
        print(_row(label, args.episodes, spans, f"{run.result['transitions']:,}", run.result["seconds"],
                   f"{run.process_s:.1f}", f"{run.peak_mib:.0f}"))
    base = runs[0][1].result["seconds"]
    print("work s relative to the one-process build: " + ", ".join(f"{label.split(', ')[-1] if 'Ray' in label else 'one process'} "
                                                                    f"{run.result['seconds'] / base:.2f}x" for label, run in runs))


if __name__ == "__main__":
    main()
