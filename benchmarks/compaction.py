"""What compaction buys a build: 1M spans in 5-second files, before and after `collector compact`.

A collector flushing every 5 s writes 720 files an hour; the spans here are spread over two
hours of such files (~700 spans each). The same folder is then compacted (one pass, its own
time measured) and built again. Each build runs in a child process pinned to 2 CPUs (the
machine's), best of ``--repeat``; peak RSS is the child's own.

    .venv/bin/python benchmarks/compaction.py [--episodes 100000] [--work /tmp/tracerl-compaction]
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pipeline_build import OURS, CPUS, run_child  # noqa: E402  (a benchmark beside this one)

from tracerl.core.storage import write_parquet_atomic  # noqa: E402
from tracerl_testing.synthetic_spans import generate  # noqa: E402

FILES_PER_HOUR = 3600 // 5
HOURS = 2

COMPACT = """
import json, sys, time
from tracerl.collector.compaction import CompactionSettings, compact
started = time.perf_counter()
results = compact(sys.argv[1], CompactionSettings(target_bytes=int(sys.argv[2]) << 20, settle_s=0, grace_s=0))
print(json.dumps({"seconds": time.perf_counter() - started, "files_in": sum(r.files_in for r in results),
                  "files_out": sum(r.files_out for r in results)}))
"""


def five_second_files(episodes: int, data: Path) -> Path:
    """``episodes`` synthetic episodes as ``HOURS`` hours of 5-second files under ``data/spans`` (made once)."""
    if (data / "spans").is_dir():
        return data
    tmp = data.with_name(data.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    files = FILES_PER_HOUR * HOURS
    chunk = 20_000
    per_file = -(-episodes * 10 // files)  # generate() makes 10 spans an episode
    written = 0
    print(f"generating {episodes} episodes as {files} files -> {data} (once)", flush=True)
    for first in range(0, episodes, chunk):
        table = generate(min(chunk, episodes - first), first=first, seed=first)
        for start in range(0, table.num_rows, per_file):
            hour = min(written // FILES_PER_HOUR, HOURS - 1)
            write_parquet_atomic(table.slice(start, per_file), str(tmp / "spans"), prefix="collector",
                                 partition=f"date=2026-01-01/hour={hour:02d}")
            written += 1
    tmp.rename(data)
    return data


def file_count(data: Path) -> int:
    return sum(1 for p in (data / "spans").rglob("*.parquet") if not p.name.startswith("."))


def span_count(data: Path) -> int:
    return sum(pq.ParquetFile(p).metadata.num_rows for p in (data / "spans").rglob("*.parquet"))


def best_build(data: Path, out: Path, repeat: int):
    runs = []
    for _ in range(repeat):
        shutil.rmtree(out, ignore_errors=True)
        runs.append(run_child([sys.executable, "-c", OURS.format(cpus=CPUS), str(data), str(out)]))
    return min(runs, key=lambda run: run.result["seconds"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=100_000, help="10 spans each")
    parser.add_argument("--work", type=Path, default=Path("/tmp/tracerl-compaction"))
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--target-mb", type=int, default=32, help="collector compact --target-mb")
    args = parser.parse_args()

    small = five_second_files(args.episodes, args.work / f"small-{args.episodes}")
    compacted = args.work / f"compacted-{args.episodes}"
    shutil.rmtree(compacted, ignore_errors=True)
    shutil.copytree(small, compacted)
    files_before = file_count(small)
    pass_run = run_child([sys.executable, "-c", COMPACT, str(compacted), str(args.target_mb)])
    before = best_build(small, args.work / "out", args.repeat)
    after = best_build(compacted, args.work / "out", args.repeat)
    assert before.result["transitions"] == after.result["transitions"], "compaction changed what a build reads"

    spans = span_count(compacted)
    print(f"\n{spans:,} spans, {HOURS} hours of 5-second files, compacted to {args.target_mb} MiB files; "
          f"builds on {CPUS} CPUs, best of {args.repeat}")
    print(f"{'':<22}{'files':>8}{'build s':>10}{'peak MiB':>10}{'transitions':>13}")
    for label, files, run in (("5-second files", files_before, before), ("compacted", file_count(compacted), after)):
        print(f"{label:<22}{files:>8}{run.result['seconds']:>10.2f}{run.peak_mib:>10.0f}{run.result['transitions']:>13,}")
    print(f"\ncompaction pass: {pass_run.result['files_in']} files -> {pass_run.result['files_out']} in "
          f"{pass_run.result['seconds']:.1f} s ({spans / pass_run.result['seconds']:,.0f} spans/s), peak {pass_run.peak_mib:.0f} MiB")
    print(f"compacted / 5-second files: build time {after.result['seconds'] / before.result['seconds']:.2f}x, "
          f"files {file_count(compacted) / files_before:.4f}x")


if __name__ == "__main__":
    main()
