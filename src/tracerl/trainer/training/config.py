"""What one training pass does; every entry point takes its options and defaults from here.

``tracerl train``, ``tracerl train run``/``loop``, ``tracerl demo`` and the examples build a
:class:`TrainConfig`, which every backend reads with the same meaning, and the options of the
chosen backend (:class:`TorchOptions`, :class:`OpenRLHFOptions`: the ``options`` of its row in
:data:`~tracerl.trainer.training.backends.BACKENDS`) through the same command-line options
(:mod:`~tracerl.trainer.training.options`). A backend's options declare their own flags in
their fields (:func:`~tracerl.core.dataclass_options.option`) and check themselves when built,
whether from flags or a round's TOML section. Kept free of torch so that ``tracerl --help`` and
option parsing stay fast.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tracerl.core.dataclass_options import option
from tracerl.trainer.trackers import parse_report_to

# Learning rates when none is given, by what is trained: full weights of a real model take
# small steps (the range RL fine-tuning of 0.5-7B instruct models uses); a LoRA adapter's
# low-rank update needs about ten times more for the same change.
FULL_WEIGHTS_LEARNING_RATE = 1e-6
LORA_LEARNING_RATE = 1e-5


@dataclass
class TrainConfig:
    learning_rate: float | None = None  # None: by what is trained (see default_learning_rate)
    epochs: int = 2  # passes over one round's batch (PPO reuse)
    minibatch_size: int = 64  # samples per optimizer step, over all processes
    # samples per forward/backward of one process (gradients accumulate up to the minibatch);
    # None: as many as micro_batch_tokens allows
    micro_batch_size: int | None = None
    # padded tokens (rows x the longest row) per forward/backward, whatever micro_batch_size says: what bounds
    # the activations' memory (verl's dynamic batch size). None: DEFAULT_MICRO_BATCH_TOKENS of the device
    micro_batch_tokens: int | None = None
    # the temperature the rollouts were sampled at: log-probs are those of softmax(logits / T), the policy
    # that sampled them (the servers report the same), so the ratio and gradient are for it
    rollout_temperature: float = 1.0
    clip_epsilon: float = 0.2  # PPO clip range of the ratio to the round's starting policy
    # trainer/sampler probability ratios outside this band drop the token (objective.py)
    is_bounds: tuple[float, float] = (0.5, 5.0)
    max_grad_norm: float = 1.0
    seed: int = 0
    # torch threads while training on CPU (None: torch's default). Small models lose more to
    # thread hand-offs than they gain: one thread measured ~13x faster on 2 busy cores.
    num_threads: int | None = 1
    dtype: str | None = None  # "bf16", "fp16" or "fp32"; None: bf16 with CUDA, fp32 without
    attn_implementation: str | None = None  # None: flash_attention_2 where its kernels import on CUDA, else sdpa
    gradient_checkpointing: bool | None = None  # None: on with CUDA, off on CPU
    logprob_chunk: int = 1024  # tokens of a micro-batch whose logits exist at once (logprobs.py)
    lora_rank: int = 0  # > 0: train (and save) a LoRA adapter instead of the full weights
    lora_alpha: int = 16
    # experiment trackers the driver reports each round to (tracerl.trainer.trackers): Hugging Face's report_to,
    # given as "mlflow,wandb" or a list; () and "none": none; "all": every one installed
    report_to: tuple[str, ...] = ()

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

    zero_stage: int = field(default=2, metadata=option("--zero-stage", min=0, max=3, help="DeepSpeed ZeRO stage (default 2)."))
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
