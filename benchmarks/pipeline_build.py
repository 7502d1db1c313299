"""Benchmark: spans -> training dataset, tracerl vs agentlightning's span-to-triplet adapter.

One run prints both side by side. tracerl runs ``build_dataset`` in a child process
pinned to 2 CPUs (wall time and that child's peak RSS). The peer,
``agentlightning.adapter.TracerTraceToTriplet`` (agentlightning 0.3.0), runs in a child
of its own virtual environment (``--peer-python``, or ``$TRACERL_AGL_PYTHON``; skipped
with a message when absent) on the first ``--peer-episodes`` episodes of the same span
set, converted to the JSON shape its store keeps; its time is extrapolated linearly to
the full set, which is said in the output. The peer does strictly less work (no Parquet
read or write, no rewards beyond one per call, no advantages), so the ratio is
conservative.

    python benchmarks/pipeline_build.py                       # 100,000 episodes, 1,000,000 spans
    python benchmarks/pipeline_build.py --episodes 2000 --peer-episodes 500   # a quick look

The span set is generated once (benchmarks/pipeline_synthetic.py) and cached under
``--data`` (default ``/tmp/tracerl-bench/spans-<episodes>``).
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
from pathlib import Path

import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from pipeline_synthetic import generate, write  # noqa: E402

from tracerl.schemas import attributes as A  # noqa: E402

CPUS = 2

OURS = """
import json, sys, time
from tracerl.pipeline import build_dataset
started = time.perf_counter()
manifest = build_dataset(sys.argv[1], sys.argv[2], threads={cpus})
print(json.dumps({{"seconds": time.perf_counter() - started, "rows": manifest["counts"]["rows_written"],
                  "warnings": manifest["warnings"]}}))
"""


def _pin() -> None:
    if hasattr(os, "sched_setaffinity") and len(os.sched_getaffinity(0)) > CPUS:
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:CPUS])


def run_child(argv: list[str], env: dict | None = None) -> tuple[dict, float, float, float]:
    """(last stdout line as JSON, wall seconds, peak RSS MiB, CPU seconds) of one child process."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        started = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=err, text=True, env=env, preexec_fn=_pin)
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own peak RSS
        wall = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0), err.seek(0)
        if proc.returncode != 0:
            raise SystemExit(f"{argv[0]} failed ({proc.returncode}):\n{err.read()[-3000:]}")
        cpu = usage.ru_utime + usage.ru_stime
        return json.loads(out.read().strip().splitlines()[-1]), wall, usage.ru_maxrss / 1024, cpu


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


def peer_jsonl(data: Path, episodes: int, target: Path) -> int:
    """The spans of the first ``episodes`` episodes as agentlightning ``Span`` JSON (its store's shape)."""
    wanted, written = set(), 0
    with open(target, "w") as handle:
        for file in sorted((data / "spans").rglob("*.parquet")):
            for row in pq.read_table(file).to_pylist():
                if row["episode_id"] not in wanted:
                    if len(wanted) >= episodes:
                        return written
                    wanted.add(row["episode_id"])
                handle.write(json.dumps(_agl_span(row)) + "\n")
                written += 1
    return written


def _agl_span(row: dict) -> dict:
    attrs = json.loads(row["attributes"] or "{}")
    name = row["name"]
    out: dict = {}
    if row["completion_token_ids"] is not None:
        name = "openai.chat.completion"  # what the peer matches LLM calls by
        out = {"prompt_token_ids": row["prompt_token_ids"], "response_token_ids": row["completion_token_ids"],
               "gen_ai.response.id": row["response_id"], "gen_ai.prompt.0.role": "user",
               "gen_ai.prompt.0.content": attrs.get(A.GEN_AI_INPUT_MESSAGES, ""),
               "gen_ai.completion.0.role": "assistant", "gen_ai.completion.0.content": attrs.get(A.GEN_AI_OUTPUT_MESSAGES, "")}
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=100_000)
    parser.add_argument("--peer-episodes", type=int, default=5_000)
    parser.add_argument("--data", type=Path)
    parser.add_argument("--peer-python", default=os.environ.get("TRACERL_AGL_PYTHON", "/tmp/aglvenv2/bin/python"))
    args = parser.parse_args()
    data = span_set(args.episodes, args.data or Path(tempfile.gettempdir()) / "tracerl-bench" / f"spans-{args.episodes}")
    spans = sum(pq.ParquetFile(f).metadata.num_rows for f in (data / "spans").rglob("*.parquet"))
    with tempfile.TemporaryDirectory(prefix="tracerl-bench-out-") as out:
        load = os.getloadavg()[0]
        ours, wall, rss, cpu = run_child([sys.executable, "-c", OURS.format(cpus=CPUS), str(data), out])
    print(f"\nspans -> dataset, {spans:,} spans / {args.episodes:,} episodes, {CPUS} CPUs "
          f"(load average {load:.1f} when tracerl started: other work on the machine slows both sides)")
    print(f"{'':34}{'wall s':>10}{'peak MiB':>10}{'spans/s':>12}")
    print(f"{'tracerl build_dataset':34}{wall:10.1f}{rss:10.0f}{spans / wall:12,.0f}   "
          f"({ours['rows']:,} transitions; {cpu:.1f} CPU s)")
    if not Path(args.peer_python).exists():
        print(f"\npeer skipped: no agentlightning venv at {args.peer_python} (set --peer-python or TRACERL_AGL_PYTHON;"
              " python3 -m venv V && V/bin/pip install torch==2.13.0 agentlightning==0.3.0)")
        return
    with tempfile.TemporaryDirectory(prefix="tracerl-bench-peer-") as tmp:
        jsonl = Path(tmp) / "spans.jsonl"
        peer_jsonl(data, args.peer_episodes, jsonl)
        env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
        peer, _, peer_rss, _ = run_child([args.peer_python, str(HERE / "pipeline_peer_agentlightning.py"), str(jsonl)], env)
    scale = spans / peer["spans"]
    total = (peer["load_s"] + peer["adapt_s"]) * scale
    adapt = peer["adapt_s"] * scale
    print(f"{'agentlightning ' + peer['version'] + ' load+adapt':34}{total:10.1f}{peer_rss:10.0f}{spans / total:12,.0f}"
          f"   (measured on {peer['spans']:,} spans, x{scale:.1f}; {peer['triplets']:,} triplets)")
    print(f"{'agentlightning adapt only':34}{adapt:10.1f}{'':10}{spans / adapt:12,.0f}")
    print(f"\nspeed-up: {total / wall:.0f}x vs load+adapt, {adapt / wall:.0f}x vs adapt alone "
          f"(targets: < 30 s, < 4096 MiB, >= 20x)")


if __name__ == "__main__":
    main()
