"""What one run of the local loop does, and its command line: each field declares its option once.

Every recipe's defaults are a :class:`LocalConfig`; ``tracerl demo`` and each
``examples/*/train.py`` take one option per field with an ``option`` (kept free of torch).
``--agents`` and ``--policy`` are the build's own options (:class:`BuildOptions`), meaning
the same here. The training options (``--backend``, ``--lr``, ...) are the trainer's own
(:mod:`tracerl.trainer.training.options`), shared with ``tracerl train``.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from tracerl.core.dataclass_options import nested_options, one_of, option, option_of
from tracerl.pipeline.options import CREDITS, BuildOptions
from tracerl.trainer.serving.vllm_process import VllmOptions
from tracerl.trainer.training.backends import DEFAULT_BACKEND
from tracerl.trainer.training.config import TrainConfig

SERVERS = ("tracerl", "vllm")  # what serves the policy: `tracerl serve` in a thread, or `vllm serve` (its own venv)


@dataclass
class LocalConfig:
    out: Path | None = field(default=None, metadata=option(
        "--out", help="Folder for metrics.jsonl, reward_curve.png, checkpoints and each round's data (default: runs/RECIPE)."))
    rounds: int = field(default=8, metadata=option("--rounds", min=0, help="Training rounds after the round-0 evaluation."))
    tasks_per_round: int = field(default=32, metadata=option("--tasks-per-round", min=1, help="Training tasks sampled each round."))
    group_size: int = field(default=4, metadata=option("--group-size", min=1, help="Samples per task (the GRPO group)."))
    # both servers log the log-probs of the tempered distribution each token was drawn from, and the trainer
    # computes the same (TrainConfig.rollout_temperature, set from this): the policy trained is the one sampled
    temperature: float = field(default=1.0, metadata=option(
        "--temperature", min=0.0,
        help="Sampling temperature of the training episodes (held-out ones are greedy); below 1 keeps a small model's samples "
             "near what it would answer, so a group's rewards differ by its choices rather than by noise."))
    eval_tasks: int = field(default=100, metadata=option("--eval-tasks", min=0, help="Held-out tasks, run greedily every round."))
    seed: int = field(default=0, metadata=option("--seed", help="Seeds the tasks, the samples and the trainer: the same seed, the same rows."))
    model: str | None = field(default=None, metadata=option(
        "--model", help="Starting policy: a folder or a hub id (default: a tiny model built and warm-started locally)."))
    server: str = field(default=SERVERS[0], metadata=option(
        "--server", from_cli=one_of(SERVERS),
        help=f"What serves the policy: {' or '.join(SERVERS)} (`vllm serve` from TRACERL_VLLM_PYTHON's venv, reloaded from disk each round)."))
    tool_call_parser: str | None = field(default=None, metadata=option(
        "--tool-call-parser",
        help="With --server vllm: vLLM's parser of the model's tool calls, for agents that send tools (hermes for Qwen and the tiny "
             "model, llama3_json for Llama 3; the built-in server parses hermes)."))
    data: Path | None = field(default=None, metadata=option(
        "--data", exists=True, help="The agent's public data set in its own format (default: tasks made locally)."))
    credit: str = field(default=CREDITS[0], metadata=option(
        "--credit", from_cli=one_of(CREDITS), help=f"How an episode's reward reaches its calls: {' or '.join(CREDITS)}."))
    gamma: float = field(default=1.0, metadata=option("--gamma", min=0.0, max=1.0, help="Discount of --credit discounted."))
    trajectory: bool = field(default=False, metadata=option(
        "--trajectory/--transitions",
        help="Train on one row per episode turn sequence: calls whose prompt extends the previous prompt + response merged, "
             "tool results masked (what a trainer that runs the agent loop itself trains on); default: one row per LLM call."))
    air: bool = field(default=True, metadata=option(
        "--air/--no-air", help="Automatic intermediate rewards from tool errors and other system signals (the pipeline's default rules)."))
    # the build's --agents and --policy, meaning the same here (each policy: a LoRA adapter on one base model served by one vLLM)
    agents: str | None = field(default=None, metadata=option_of(BuildOptions, "agents"))
    policies: dict[str, tuple[str, ...]] = field(default_factory=dict, metadata=option_of(BuildOptions, "policies"))
    replay_samples: int = 32  # supervised replay samples mixed into each round's training (0: none)
    replay: bool | None = field(default=None, metadata=option(
        "--replay/--no-replay",
        help="Mix supervised replay into training (default: the recipe's format turns with its tiny model; none with --model, "
             "where --replay replays the policy's own best-rewarded outputs)."))
    tiny_learning_rate: float = 1e-3  # the recipe's warm-started tiny model, when --lr is not given
    keep_checkpoints: int = field(default=2, metadata=option(
        "--keep-checkpoints", min=0, help="Newest versions whose weights stay, besides the served one (0: all), as in `tracerl rounds`."))
    max_tokens: int | None = field(default=None, metadata=option(
        "--max-tokens", min=1, help="max_tokens of each agent call (default: the recipe's, sized for the tiny model)."))
    agent_args: tuple[str, ...] = field(default=(), metadata=option(
        "--agent-args", cli_type=Optional[str], to_cli=lambda args: " ".join(args) or None, from_cli=lambda text: tuple(shlex.split(text or "")),
        help="More arguments of the agent program, quoted as one (e.g. --agent-args=--reflect-on-tool-use for calc)."))
    # 1 makes a run exactly reproducible: batched decoding pads, which moves logits by ~1e-7, enough to flip a
    # sampled token now and then (measured: one held-out episode in round 9 of two same-seed demo runs at 16)
    concurrency: int = field(default=1, metadata=option("--concurrency", min=1, help="Episodes the agent runs at once (1: exactly reproducible)."))
    # the agent's own rewards still give the round's train and held-out means
    judge_url: str | None = field(default=None, metadata=option(
        "--judge-url",
        help="Train on a judge's scores instead of the agent's own rewards: the OpenAI-compatible URL of the judge (see `tracerl pipeline judge`)."))
    judge_model: str = field(default="judge", metadata=option("--judge-model", help="With --judge-url: the judge's model name."))
    judge_rubric: Path | None = field(default=None, metadata=option(
        "--judge-rubric", exists=True, help="With --judge-url: the rubric, a text file (default: the pipeline's)."))
    # held-out rewards stay the agent's own
    shuffle_rewards: bool = field(default=False, metadata=option(
        "--shuffle-rewards",
        help="The control of a learning claim: each training episode's whole reward (intermediate rewards included) given to another "
             "episode of its task group (same groups, same reward values, same updates, no signal)."))
    drop_zero_advantage: bool = field(default=False, metadata=option(
        "--drop-zero-advantage/--keep-zero-advantage",
        help="Train only on samples whose advantage is not 0 (a group whose episodes all earned the same teaches nothing, "
             "and its forward and backward passes cost as much as any): DAPO's dynamic sampling, without resampling."))
    # set by the training options (tracerl.trainer.training.options: TrainConfig's and the backends' fields, with
    # --backend), shared with `tracerl train`: taken once by the command, so not nested options here
    backend: str = DEFAULT_BACKEND
    train: TrainConfig = field(default_factory=TrainConfig, metadata=nested_options())
    backend_options: dict[str, Any] = field(default_factory=dict)  # each backend's own options by its name (none: its defaults)
    vllm: VllmOptions = field(default_factory=VllmOptions)

    @property
    def chosen_backend_options(self) -> object | None:
        """The options of ``backend``, for its trainer and its checkpoints' manifests (None: its defaults)."""
        return self.backend_options.get(self.backend)
