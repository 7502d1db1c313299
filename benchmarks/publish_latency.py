"""Publish latency per target, and how long agents were held while it happened.

For each target (tracerl's built-in server, vLLM reloading a full checkpoint from disk,
vLLM swapping a LoRA adapter in place) the tiny model's two versions are published in
turn ``--rounds`` times while an agent thread keeps sending one-token greedy chat
requests. Printed per target: the publish call's median and worst seconds, and the
agents' worst stall: the longest request that overlapped a publish, less the median
request when nothing is published (vLLM holds new requests while paused; the built-in
server swaps between decode steps).

    TRACERL_VLLM_PYTHON=.venv-vllm/bin/python python benchmarks/publish_latency.py --rounds 10
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path

import httpx

from tracerl.trainer.publish import BuiltinServer, VllmLora, VllmReload, publish
from tracerl.trainer.serving.app import running_server
from tracerl.trainer.serving.vllm_process import running_vllm, vllm_python
from tracerl.trainer.tiny_model import build_tiny_model
from tracerl_testing.peft_adapter_runner import run_peft_adapter


class Agent(threading.Thread):
    """Sends one-token greedy chat requests back to back, keeping each one's start and end."""

    def __init__(self, base_url: str, model: str) -> None:
        super().__init__(daemon=True)
        self.base_url, self.model = base_url, model
        self.calls: list[tuple[float, float]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        body = {"model": self.model, "messages": [{"role": "user", "content": "task: add 3 4"}], "max_tokens": 1, "temperature": 0}
        with httpx.Client(timeout=120) as client:
            while not self.stop.is_set():
                started = time.perf_counter()
                client.post(f"{self.base_url}/chat/completions", json=body).raise_for_status()
                self.calls.append((started, time.perf_counter()))


def measure(name: str, target, base_url: str, model: str, checkpoints: tuple[Path, Path], rounds: int) -> dict:
    agent = Agent(base_url, model)
    agent.start()
    time.sleep(2.0)  # calls with nothing published: the baseline
    windows, seconds = [], []
    for i in range(rounds):
        started = time.perf_counter()
        publish(checkpoints[i % 2], target)
        windows.append((started, time.perf_counter()))
        seconds.append(windows[-1][1] - started)
        time.sleep(0.5)
    agent.stop.set()
    agent.join()
    quiet = [end - start for start, end in agent.calls if not any(start < w1 and end > w0 for w0, w1 in windows)]
    held = [end - start for start, end in agent.calls if any(start < w1 and end > w0 for w0, w1 in windows)]
    baseline = statistics.median(quiet)
    return {
        "target": name, "publish_median_s": statistics.median(seconds), "publish_max_s": max(seconds),
        "agent_call_s": baseline, "agents_held_max_s": max(max(held, default=baseline) - baseline, 0.0),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="publish-latency-"))
    checkpoints = (build_tiny_model(work / "a", seed=1), build_tiny_model(work / "b", seed=2))
    rows = []
    with running_server(checkpoints[0]) as server:
        rows.append(measure("tracerl serve (load_weights)", BuiltinServer(server.base_url), server.base_url, "policy", checkpoints, args.rounds))
    python = vllm_python()
    adapters = (work / "lora-a", work / "lora-b")
    for seed, adapter in enumerate(adapters, start=1):
        run_peft_adapter(python, "write", str(checkpoints[0]), str(adapter), str(seed))
    with ExitStack() as stack:
        started = time.perf_counter()
        vllm = stack.enter_context(running_vllm(checkpoints[0], lora_rank=8, log_path=work / "vllm.log"))
        print(f"vllm serve (CPU, --enforce-eager, LoRA on) answered after {time.perf_counter() - started:.1f} s")
        rows.append(measure("vLLM reload_weights from disk", VllmReload(vllm.base_url), vllm.base_url, "policy", checkpoints, args.rounds))
        lora = VllmLora(vllm.base_url, adapter_name="policy-lora")
        publish(adapters[0], lora)
        rows.append(measure("vLLM LoRA load_inplace", lora, vllm.base_url, "policy-lora", adapters, args.rounds))
    print(f"{'target':32} {'publish median':>15} {'publish max':>12} {'agent call':>11} {'agents held (max)':>18}")
    for row in rows:
        print(
            f"{row['target']:32} {row['publish_median_s']:>14.3f}s {row['publish_max_s']:>11.3f}s "
            f"{row['agent_call_s']:>10.3f}s {row['agents_held_max_s']:>17.3f}s"
        )
    print(f"(tiny model, {os.cpu_count()} CPU cores, {args.rounds} publishes per target)")


if __name__ == "__main__":
    main()
