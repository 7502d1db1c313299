"""What one training pass does; the train CLI and the demo take their defaults from here.

Kept free of torch so that ``tracerl --help`` and option parsing stay fast. Every
backend reads the same fields with the same meaning.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class TrainConfig:
    learning_rate: float = 1e-3
    epochs: int = 2  # passes over one round's batch (PPO reuse)
    minibatch_size: int = 64
    clip_epsilon: float = 0.2  # PPO clip range of the importance ratio
    max_grad_norm: float = 1.0
    seed: int = 0
    # torch threads while training (None: torch's default). Small models lose more to
    # thread hand-offs than they gain: one thread measured ~13x faster on 2 busy cores.
    num_threads: int | None = 1


# `tracerl train --backend`: the first is the default
BACKENDS = ("torch", "openrlhf")


@dataclass
class OpenRLHFOptions:
    """What only this backend has; defaults suit one CPU (the tests) and scale up on GPUs."""

    zero_stage: int = 2
    dtype: str | None = None  # "bf16", "fp16" or "fp32"; None: bf16 with CUDA, fp32 without
    attn_implementation: str | None = None  # None: flash_attention_2 with CUDA, sdpa without
    gradient_checkpointing: bool = False
    lora_rank: int = 0  # > 0: train (and save) a LoRA adapter instead of the full weights
    lora_alpha: int = 16
    lora_target_modules: str | list[str] = "all-linear"
    reference_model: str | None = None  # frozen policy to stay close to (with kl_coef)
    kl_coef: float = 0.0
    # icepop: tokens whose trainer/sampler probability ratio leaves this band are dropped
    is_correction_threshold: tuple[float, float] = (0.5, 5.0)
