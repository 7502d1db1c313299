"""Scheduled rounds under a steady stream of episodes: capture rate, end-to-publish lag, phase times.

One machine plays production: the demo agent (an ordinary OpenAI-client program under
``opentelemetry-instrument``, capture switched on by environment variables) runs task after
task against ``tracerl serve`` and exports its spans over OTLP/HTTP to ``tracerl collector
serve``; every ``--every`` seconds a scheduler starts ``tracerl train run`` (a real process,
as cron would) on what the collector wrote, which trains and publishes to the same server.

Printed: episodes/s captured; for each episode a round trained on, the lag from its end (its
episode span's end) to the version trained on it being served (the registry's publish time);
each phase's time per round. Usage::

    python benchmarks/scheduled_round.py --duration 180 --every 30 --agents 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

from tracerl.collector.server import CollectorServer, Endpoints
from tracerl.collector.service import CollectorConfig
from tracerl.schemas import attributes as A
from tracerl.orchestration.demo import task as demo_task
from tracerl.orchestration.demo.recipe import DEMO
from tracerl.orchestration.local.warm_start import starting_policy
from tracerl.orchestration.registry import PolicyRegistry
from tracerl.pipeline.source import raw_spans_of
from tracerl.schemas import environment as E
from tracerl.trainer.serving.app import running_server

BIN = Path(sys.executable).parent


def agent_stream(base_url: str, collector_url: str, work: Path, stop: threading.Event, worker: int) -> None:
    """Run the demo agent on batches of 8 sampled training tasks until ``stop``."""
    train, _ = demo_task.all_tasks(0)
    env = {**os.environ, E.OPENAI_BASE_URL_ENV: base_url, E.OPENAI_API_KEY_ENV: "bench", E.OTEL_SERVICE_NAME_ENV: f"bench-agent-{worker}",
           E.OTEL_EXPORTER_OTLP_ENDPOINT_ENV: collector_url, E.OTEL_EXPORTER_OTLP_PROTOCOL_ENV: "http/protobuf",
           E.OTEL_TRACES_EXPORTER_ENV: "otlp", E.OTEL_METRICS_EXPORTER_ENV: "none", E.OTEL_LOGS_EXPORTER_ENV: "none",
           E.OTEL_BSP_SCHEDULE_DELAY_ENV: "500"}
    batch = 0
    while not stop.is_set():
        tasks = work / f"tasks-{worker}-{batch}.jsonl"
        picked = [train[(worker * 997 + batch * 8 + k) % len(train)] for k in range(8)]
        tasks.write_text("".join(json.dumps({**t.to_json(), "temperature": 1.0, "seed": batch * 8 + k}) + "\n" for k, t in enumerate(picked)))
        done = subprocess.run([str(BIN / "opentelemetry-instrument"), sys.executable, "-m", "tracerl.orchestration.demo.agent", str(tasks)],
                              env=env, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            print(f"agent {worker} exited {done.returncode}: {done.stderr[-2000:]}", file=sys.stderr, flush=True)
        batch += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=180.0, help="Seconds of agent traffic.")
    parser.add_argument("--every", type=float, default=30.0, help="Seconds between round starts (the schedule's period).")
    parser.add_argument("--agents", type=int, default=2, help="Agent processes running at once.")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="tracerl-bench-rounds-"))
    policy = starting_policy(DEMO, 0)
    collector = CollectorServer(CollectorConfig(out=str(work / "collected"), flush_interval_s=0.5), Endpoints(http_port=0, grpc_port=None)).start()
    rounds: list[dict] = []
    with running_server(policy) as server:
        config = work / "round.toml"
        config.write_text(f'spans = "{work / "collected"}"\nstate = "state"\nmodel = "{policy}"\nmin_episodes = 8\n'
                          f'[build]\nsplits = ["train"]\n[[endpoint]]\nurl = "{server.base_url}"\n')
        stop = threading.Event()
        agents = [threading.Thread(target=agent_stream, args=(server.base_url, collector.http_url(), work, stop, i), daemon=True)
                  for i in range(args.agents)]
        started = time.time()
        for thread in agents:
            thread.start()
        while time.time() - started < args.duration:
            t0 = time.time()
            done = subprocess.run([str(BIN / "tracerl"), "train", "run", "--config", str(config)], capture_output=True, text=True, cwd=work)
            summary = json.loads(done.stdout.strip().splitlines()[-1])
            summary["wall_s"] = round(time.time() - t0, 2)
            rounds.append(summary)
            print(json.dumps({k: summary.get(k) for k in ("status", "version", "episodes", "seconds", "wall_s", "reason")}), flush=True)
            time.sleep(max(0.0, args.every - (time.time() - t0)))
        stop.set()
        for thread in agents:
            thread.join()
        elapsed = time.time() - started
    collector.stop()

    with raw_spans_of(work / "collected") as con:  # the collector compacts while it runs: read as the pipeline does
        ends = dict(con.sql(f"SELECT episode_id, max(end_time_unix_nano) FROM raw_spans WHERE name = '{A.EPISODE_SPAN_NAME}' GROUP BY 1").fetchall())
    lags = []
    for entry in PolicyRegistry(work / "state").entries():
        if entry["kind"] != "trained" or not entry["published"]:
            continue
        served_ns = datetime.fromisoformat(entry["published"][0]["at"]).timestamp() * 1e9
        lags += [(served_ns - ends[e["episode_id"]]) / 1e9 for e in entry["episodes"] if e["episode_id"] in ends]
    trained = [r for r in rounds if r["status"] == "trained"]
    print(f"\nmachine: {os.cpu_count()} cores; {args.agents} agent processes; a round every {args.every:.0f} s for {elapsed:.0f} s")
    print(f"captured: {len(ends)} episodes, {len(ends) / elapsed:.2f} episodes/s")
    print(f"rounds: {len(rounds)} started, {len(trained)} trained, {sum(r['episodes'] for r in trained)} episodes trained on")
    if lags:
        q = statistics.quantiles(lags, n=10) if len(lags) > 1 else [lags[0]] * 9
        print(f"lag episode end -> its policy served: median {statistics.median(lags):.1f} s, p90 {q[8]:.1f} s, max {max(lags):.1f} s")
    for phase in ("build", "train", "checkpoint", "publish", "record", "report"):
        times = [r["seconds"][phase] for r in trained if phase in r.get("seconds", {})]
        if times:
            print(f"  {phase:<10} median {statistics.median(times):6.2f} s  max {max(times):6.2f} s")
    walls = [r["wall_s"] for r in trained]
    if walls:
        print(f"  {'process':<10} median {statistics.median(walls):6.2f} s  max {max(walls):6.2f} s  (start, imports, all phases, exit)")
    print(f"work folder: {work}")


if __name__ == "__main__":
    main()
