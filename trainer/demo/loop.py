"""``tracerl demo``: the whole loop, round after round, on one CPU machine.

Each round:

1. the demo agent (an ordinary OpenAI-client program, :mod:`tracerl.trainer.demo.agent`)
   runs under ``tracerl run`` against the policy endpoint: held-out tasks greedily,
   training tasks sampled ``group_size`` times each. Capture is switched on by
   environment variables only, exactly as a user's agent;
2. the pipeline turns that round's spans into transitions (one per LLM call);
3. the torch backend takes a clipped policy-gradient step on them and writes a
   checkpoint, which :func:`tracerl.trainer.publish.publish` makes the endpoint serve as
   the next policy version.

The endpoint is tracerl's built-in server or ``vllm serve`` (``DemoConfig.server``),
started on the starting policy for the whole run.

Round 0 evaluates the starting policy before any training. Metrics go to
``OUT/metrics.jsonl`` and the reward curve to ``OUT/reward_curve.png``.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path

import duckdb

from tracerl.schemas import attributes as A
from tracerl.trainer.demo import task as demo_task
from tracerl.trainer.demo.config import DEMO_SERVERS, DemoConfig
from tracerl.trainer.demo.warm_start import ensure_demo_policy
from tracerl.trainer.publish import BuiltinServer, PublishTarget, VllmReload, publish
from tracerl.trainer.training.backend import TrainingBackend
from tracerl.trainer.training.dataset import read_dataset
from tracerl.trainer.training.torch_backend import PolicyTrainer


class AgentRunError(RuntimeError):
    """The agent process failed; its output says why."""


@dataclass(frozen=True)
class PolicyEndpoint:
    """Where the agents send their calls, and the publish target that refreshes what answers there."""

    base_url: str  # the agents' OPENAI_BASE_URL
    target: PublishTarget


@contextmanager
def policy_endpoint(server: str, start: Path) -> Iterator[PolicyEndpoint]:
    """``server`` (one of ``DEMO_SERVERS``) serving ``start`` as policy version 0 until the block ends."""
    if server == "tracerl":
        from tracerl.trainer.serving.app import running_server

        with running_server(start) as builtin:
            yield PolicyEndpoint(builtin.base_url, BuiltinServer(builtin.base_url))
    elif server == "vllm":
        from tracerl.trainer.serving.vllm_process import running_vllm

        with running_vllm(start) as vllm:
            yield PolicyEndpoint(vllm.base_url, VllmReload(vllm.base_url, served_checkpoint=start))
    else:
        raise ValueError(f"unknown demo server {server!r}: use one of {', '.join(DEMO_SERVERS)}")


def write_round_tasks(path: Path, train: list[demo_task.Task], held_out: list[demo_task.Task], cfg: DemoConfig, rnd: int) -> None:
    rng = random.Random(cfg.seed * 1000 + rnd)
    lines = [{**t.to_json(), "temperature": 0.0, "seed": 0} for t in held_out[: cfg.eval_tasks]]
    for task in rng.sample(train, cfg.tasks_per_round):
        for k in range(cfg.group_size):
            lines.append({**task.to_json(), "temperature": 1.0, "seed": rng.randrange(2**31) + k})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")


def run_agent(tasks_file: Path, data_dir: Path, base_url: str) -> None:
    """Run the demo agent with capture switched on by environment variables only."""
    env = {
        **os.environ,
        "OPENAI_BASE_URL": base_url,
        "OPENAI_API_KEY": "tracerl-demo",
        "TRACERL_DATA_DIR": str(data_dir),
        "OTEL_SERVICE_NAME": "tracerl-demo-agent",
    }
    command = [sys.executable, "-m", "tracerl", "run", "--", sys.executable, "-m", "tracerl.trainer.demo.agent", str(tasks_file)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise AgentRunError(f"the demo agent exited with {done.returncode}:\n{done.stderr[-4000:]}")


def mean_rewards_by_split(data_dir: Path) -> dict[str, float]:
    """Mean episode reward per split, read back from the captured reward spans."""
    query = f"""
        SELECT split, avg(reward_value) AS mean_reward
        FROM read_parquet('{data_dir}/spans/**/*.parquet', union_by_name = true)
        WHERE name = '{A.REWARD_SPAN_NAME}' GROUP BY split
    """
    return {split: float(value) for split, value in duckdb.sql(query).fetchall()}


def plot_reward_curve(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rounds = [r["round"] for r in rows]
    fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
    ax.plot(rounds, [r["train_mean_reward"] for r in rows], marker="o", label="train (sampled)")
    ax.plot(rounds, [r["eval_mean_reward"] for r in rows], marker="s", label="held-out (greedy)")
    ax.set_xlabel("round (policy version)")
    ax.set_ylabel("mean episode reward")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("tracerl demo: calculator agent, tiny model")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def run_demo(cfg: DemoConfig, on_phase: Callable[[int, str], None] | None = None, endpoint: PolicyEndpoint | None = None) -> list[dict]:
    """Run ``cfg.rounds`` training rounds (plus round 0); return the metrics rows.

    The agents call ``endpoint`` when given (already serving the starting policy), else
    ``cfg.server`` started here on it.
    """
    from tracerl.pipeline import build_dataset

    def phase(rnd: int, text: str) -> None:
        if on_phase:
            on_phase(rnd, text)

    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    metrics_path = out / "metrics.jsonl"
    metrics_path.write_text("")
    phase(0, "preparing the starting policy")
    start = Path(cfg.model) if cfg.model else ensure_demo_policy(cfg.seed)
    trainer: TrainingBackend = PolicyTrainer(start, cfg.train)
    train_tasks, held_out = demo_task.all_tasks(cfg.seed)
    rows: list[dict] = []
    with nullcontext(endpoint) if endpoint else policy_endpoint(cfg.server, start) as served:
        for rnd in range(cfg.rounds + 1):
            t0 = time.time()
            round_dir = out / "rounds" / f"{rnd:03d}"
            round_dir.mkdir(parents=True, exist_ok=True)
            tasks_file = round_dir / "tasks.jsonl"
            write_round_tasks(tasks_file, train_tasks, held_out, cfg, rnd)
            phase(rnd, "running the agent")
            run_agent(tasks_file, round_dir / "data", served.base_url)
            rewards = mean_rewards_by_split(round_dir / "data")
            phase(rnd, "building the dataset")
            manifest = build_dataset(round_dir / "data", round_dir / "dataset", splits=("train",))
            row = {
                "round": rnd,
                "policy_version": rnd,
                "train_mean_reward": rewards.get("train"),
                "eval_mean_reward": rewards.get("test"),
                "transitions": int(manifest["counts"]["transitions"]),
            }
            if rnd < cfg.rounds:
                phase(rnd, "training")
                samples, skipped = read_dataset(round_dir / "dataset")
                stats = trainer.train(samples)
                checkpoint = trainer.save(out / "policy" / f"v{rnd + 1}")
                publish(checkpoint, served.target, version=rnd + 1)
                row.update(
                    train_loss=stats.loss, clip_fraction=stats.clip_fraction, approx_kl=stats.approx_kl,
                    served_logprob_gap=stats.served_logprob_gap, skipped=skipped,
                )
            row["seconds"] = round(time.time() - t0, 2)
            rows.append(row)
            with metrics_path.open("a", encoding="utf-8") as handle:
                handle.write(json.dumps(row) + "\n")
            plot_reward_curve(rows, out / "reward_curve.png")
    (out / "config.json").write_text(json.dumps(asdict(cfg), default=str, indent=2))
    return rows
