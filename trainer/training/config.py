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
