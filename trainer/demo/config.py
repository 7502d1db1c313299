"""What ``tracerl demo`` runs; its command-line defaults are these (kept free of torch)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tracerl.trainer.training.config import TrainConfig

DEMO_SERVERS = ("tracerl", "vllm")  # what serves the policy: `tracerl serve` in a thread, or `vllm serve` (its own venv)


@dataclass
class DemoConfig:
    out: Path = Path("runs/demo")  # metrics.jsonl, reward_curve.png, checkpoints, each round's data
    rounds: int = 8  # training rounds after the round-0 evaluation
    tasks_per_round: int = 32
    group_size: int = 4  # samples per training task (the GRPO group)
    eval_tasks: int = 100  # held-out tasks, run greedily every round
    seed: int = 0
    model: str | None = None  # starting policy; default: the warm-started tiny model
    server: str = DEMO_SERVERS[0]  # one of DEMO_SERVERS
    train: TrainConfig = field(default_factory=TrainConfig)
