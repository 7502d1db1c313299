"""What one run of the local loop does; every command-line default of a recipe comes from here (kept free of torch)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tracerl.pipeline.options import CREDITS
from tracerl.trainer.serving.vllm_process import VllmOptions
from tracerl.trainer.training.config import BACKENDS, OpenRLHFOptions, TrainConfig

SERVERS = ("tracerl", "vllm")  # what serves the policy: `tracerl serve` in a thread, or `vllm serve` (its own venv)


@dataclass
class LoopConfig:
    out: Path | None = None  # metrics.jsonl, reward_curve.png, checkpoints, each round's data; None: runs/<recipe>
    rounds: int = 8  # training rounds after the round-0 evaluation
    tasks_per_round: int = 32
    group_size: int = 4  # samples per training task (the GRPO group)
    eval_tasks: int = 100  # held-out tasks, run greedily every round
    seed: int = 0
    model: str | None = None  # starting policy; None: the recipe's warm-started tiny model
    server: str = SERVERS[0]  # one of SERVERS
    # vLLM's parser of the model's tool calls (`vllm serve --tool-call-parser`), for agents that send
    # `tools`: "hermes" for the tiny model and Qwen, "llama3_json" for Llama 3; the built-in server parses hermes
    tool_call_parser: str | None = None
    data: Path | None = None  # the recipe's public data set (its own format); None: tasks made locally
    credit: str = CREDITS[0]  # how an episode's reward reaches its calls (pipeline --credit)
    gamma: float = 1.0  # discount of --credit discounted (pipeline --gamma)
    air: bool = True  # automatic intermediate rewards from system signals (pipeline's default rules)
    agents: str | None = None  # train only these agents' calls (pipeline --agents), e.g. "writer,rewriter"
    # a policy per group of agents: {policy name: agent names}, each a LoRA adapter on one base model served by
    # one vLLM, the agents calling their policy's name (--policy writer=writer,rewriter --policy checker=checker)
    policies: dict[str, tuple[str, ...]] = field(default_factory=dict)
    replay_samples: int = 32  # supervised replay samples mixed into each round's training (0: none)
    # None: the recipe's format turns with its warm-started tiny model, nothing with --model.
    # True with --model: the policy's own best-rewarded outputs of earlier rounds (never the tiny model's format)
    replay: bool | None = None
    tiny_learning_rate: float = 1e-3  # the recipe's warm-started tiny model, when --lr is not given
    keep_checkpoints: int = 2  # the newest checkpoints kept on disk (the served one is always among them)
    max_tokens: int | None = None  # the agent's max_tokens per call (None: the recipe's, sized for the tiny model)
    agent_args: tuple[str, ...] = ()  # more arguments of the agent program, its own switches (calc: --reflect-on-tool-use)
    # episodes the agent runs at once. 1 makes a run exactly reproducible: batched decoding pads, which moves
    # logits by ~1e-7, enough to flip a sampled token now and then (measured: one held-out episode in round 9
    # of two same-seed demo runs at 16). On the tiny model a round took about as long at 1 as at 16.
    concurrency: int = 1
    # rewards from a judge model instead of the agent's own: each round's training episodes are scored by
    # `tracerl pipeline judge` at this OpenAI-compatible URL and only those scores are trained on (the agent's
    # own rewards still give the round's train and held-out means)
    judge_url: str | None = None
    judge_model: str = "judge"
    judge_rubric: Path | None = None  # a text file; None: the pipeline's default rubric
    # the control of a learning claim: each round's training-episode rewards permuted among its episodes before
    # the build (same loop, same number of updates, no signal); held-out rewards stay the agent's own
    shuffle_rewards: bool = False
    backend: str = BACKENDS[0]
    train: TrainConfig = field(default_factory=TrainConfig)
    openrlhf: OpenRLHFOptions = field(default_factory=OpenRLHFOptions)
    vllm: VllmOptions = field(default_factory=VllmOptions)
