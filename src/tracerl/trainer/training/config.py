"""What one training pass does; every entry point takes its options and defaults from here.

``tracerl train``, ``tracerl train run``/``loop``, ``tracerl demo`` and the examples build a
:class:`TrainConfig`, which every backend reads with the same meaning, and the options of the
chosen backend (:class:`TorchOptions`, :class:`OpenRLHFOptions`: the ``options`` of its row in
:data:`~tracerl.trainer.training.backends.BACKENDS`) through the same command-line options
(:mod:`~tracerl.trainer.training.options`). ``TrainConfig`` and a backend's options declare
their flags in their fields (:func:`~tracerl.core.dataclass_options.option`), whose names are
a round file's keys (``[train]``, ``[openrlhf]``); a backend's options check themselves when
built, whether from flags or a round's TOML section. Kept free of torch so that ``tracerl --help`` and
option parsing stay fast.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tracerl.core.dataclass_options import one_of, option
from tracerl.trainer.trackers import parse_report_to

# Learning rates when none is given, by what is trained: full weights of a real model take
# small steps (the range RL fine-tuning of 0.5-7B instruct models uses); a LoRA adapter's
# low-rank update needs about ten times more for the same change.
FULL_WEIGHTS_LEARNING_RATE = 1e-6
LORA_LEARNING_RATE = 1e-5


DTYPES = ("bf16", "fp16", "fp32")


@dataclass
class TrainConfig:
    """One training pass's settings: each field with an ``option`` is a flag of every command that trains
    (:mod:`~tracerl.trainer.training.options`) and a key of a round file's ``[train]``, bounds checked in both."""

    # None: by what is trained (default_learning_rate)
    learning_rate: float | None = field(default=None, metadata=option(
        "--lr", min=0.0,
        help=f"Learning rate (default: {FULL_WEIGHTS_LEARNING_RATE:g} for full weights, {LORA_LEARNING_RATE:g} for LoRA; a recipe's "
             "tiny model has its own). 0: the same run without learning."))
    epochs: int = field(default=2, metadata=option("--epochs", min=1, help="Passes over each round's samples."))  # PPO's reuse of a batch
    minibatch_size: int = field(default=64, metadata=option("--minibatch-size", min=1, help="Samples per optimizer step, over all processes."))
    # None: as many as micro_batch_tokens allows
    micro_batch_size: int | None = field(default=None, metadata=option(
        "--micro-batch-size", min=1, help="Samples per forward/backward of one process; gradients accumulate to the minibatch (bounds memory)."))
    # what bounds the activations' memory (verl's dynamic batch size). None: DEFAULT_MICRO_BATCH_TOKENS of the device
    micro_batch_tokens: int | None = field(default=None, metadata=option(
        "--micro-batch-tokens", min=1,
        help="Padded tokens (rows x longest row) per forward/backward, whatever --micro-batch-size says (default: 4096 on CPU, 16384 on CUDA)."))
    # log-probs are those of softmax(logits / T), the policy that sampled them (the servers report the same),
    # so the ratio and gradient are for it
    rollout_temperature: float = field(default=1.0, metadata=option(
        "--rollout-temperature", min=0.0,
        help="The temperature the training samples were drawn at: the trainer's log-probs are the tempered policy's, as sampled "
             "(the local loop sets it from its --temperature)."))
    clip_epsilon: float = field(default=0.2, metadata=option("--clip", min=0.0, help="PPO clip range of the ratio to the round's starting policy."))
    # trainer/sampler probability ratios outside this band drop the token (objective.py)
    is_bounds: tuple[float, float] = (0.5, 5.0)
    max_grad_norm: float = 1.0
    seed: int = 0  # each command's own --seed: the local loop's also seeds its tasks and samples
    # None or 0: torch's default. Small models lose more to thread hand-offs than they gain: one thread
    # measured ~13x faster on 2 busy cores. --threads is torch's threads wherever it is a flag (`tracerl
    # serve`'s decoding loop too); the build's DuckDB threads are --duckdb-threads.
    num_threads: int | None = field(default=1, metadata=option(
        "--threads", min=0,
        help="torch threads while training on CPU, as in `tracerl serve` (0: torch's default; 1 suits small models, which lose "
             "to thread hand-offs; a 135M model trains ~2x faster on 2). A build's DuckDB threads are --duckdb-threads."))
    dtype: str | None = field(default=None, metadata=option(
        "--dtype", from_cli=one_of(DTYPES), help=f"{', '.join(DTYPES)} (default: bf16 with CUDA, fp32 without)."))
    attn_implementation: str | None = None  # None: flash_attention_2 where its kernels import on CUDA, else sdpa
    gradient_checkpointing: bool | None = field(default=None, metadata=option(
        "--gradient-checkpointing/--no-gradient-checkpointing", help="Recompute activations in the backward pass (default: on with CUDA)."))
    # logprobs.py
    logprob_chunk: int = field(default=1024, metadata=option(
        "--logprob-chunk", min=1, help="Tokens of a micro-batch whose logits exist at once (bounds the output head's memory)."))
    # > 0: train (and save) a LoRA adapter instead of the full weights
    lora_rank: int = field(default=0, metadata=option(
        "--lora-rank", min=0, help="Train a LoRA adapter of this rank instead of the full weights."))
    lora_alpha: int = field(default=16, metadata=option("--lora-alpha", min=1, help="LoRA scale numerator."))
    # experiment trackers the driver reports each round to (tracerl.trainer.trackers): Hugging Face's report_to,
    # given as "mlflow,wandb" or a list; () and "none": none; "all": every one installed
    report_to: tuple[str, ...] = field(default=(), metadata=option(
        "--report-to", metavar="TRACKERS", cli_type=str, to_cli=",".join, from_cli=parse_report_to,
        help="Report each round's metrics, the config and the reward curve to these trackers: comma-separated mlflow, tensorboard, "
             "trackio, wandb; all (every one installed) or none (the default). pip install 'tracerl[trackers]'."))

    def __post_init__(self) -> None:
        self.report_to = parse_report_to(self.report_to)  # an unknown name: ValueError naming the known ones


# A forward and backward of SmolLM2-135M in float32 on CPU hold ~1.2 MB of activations a token (measured:
# 16 x 580 tokens in one micro-batch was OOM-killed at 20 GB): 4k tokens stay near 5 GB. On CUDA, verl's
# default token budget per GPU.
DEFAULT_MICRO_BATCH_TOKENS = {"cpu": 4096, "cuda": 16384}


def default_learning_rate(config: TrainConfig) -> float:
    """``config``'s learning rate, or the default for what it trains."""
    if config.learning_rate is not None:
        return config.learning_rate
    return LORA_LEARNING_RATE if config.lora_rank > 0 else FULL_WEIGHTS_LEARNING_RATE


@dataclass(frozen=True)
class TorchOptions:
    """The torch backend has no options of its own: everything it reads is in :class:`TrainConfig`."""


@dataclass(frozen=True)
class OpenRLHFOptions:
    """What only the OpenRLHF backend has; defaults suit one device and scale up on GPUs."""

    zero_stage: int = field(default=2, metadata=option("--zero-stage", min=0, max=3, help="DeepSpeed ZeRO stage."))
    # Adam's fp32 moments and master weights in host memory (DeepSpeed's CPU Adam): what lets full
    # weights of a 7B model train on one GPU (on a 141 GB H200, ZeRO-2 without it runs out of memory
    # allocating the moments: benchmarks/results/gpu_check-h200-2026-11-26.jsonl), at the cost of
    # optimizer steps on the CPU.
    adam_offload: bool = field(default=False, metadata=option(
        "--adam-offload/--no-adam-offload", help="Keep Adam's moments and fp32 weights in host memory (full weights of a 7B model on one GPU)."))
    lora_target_modules: str | list[str] = "all-linear"
    # frozen policy to stay close to (with kl_coef)
    reference_model: str | None = field(default=None, metadata=option(
        "--ref-model", cli_type=Path, from_cli=str, help="Frozen reference policy of a KL penalty (with --kl-coef)."))
    kl_coef: float = field(default=0.0, metadata=option("--kl-coef", min=0.0, help="Weight of the k3 KL to --ref-model."))

    def __post_init__(self) -> None:
        if self.kl_coef > 0 and self.reference_model is None:
            raise ValueError("a KL penalty (kl_coef) needs the policy to stay close to: pass --ref-model too (reference_model in a config file)")
