"""What a training backend is to its callers (the train CLI, the demo, scheduled rounds).

The torch backend (:mod:`~tracerl.trainer.training.torch_backend`) is the CPU default;
another backend takes the same :class:`~tracerl.trainer.training.config.TrainConfig`,
the same samples, and reports the same metrics, so callers never ask which one runs.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol

from tracerl.trainer.training.config import TrainConfig
from tracerl.trainer.training.dataset import Sample


@dataclass
class TrainMetrics:
    samples: int = 0
    tokens: int = 0  # action tokens trained on
    steps: int = 0  # optimizer steps
    loss: float = 0.0  # mean over steps
    # share of action tokens where the clip binds: the ratio is past 1 + eps with a positive
    # advantage or below 1 - eps with a negative one (OpenRLHF's clip_ratio, same meaning)
    clip_fraction: float = 0.0
    approx_kl: float = 0.0  # mean of (old log-prob - current log-prob) over action tokens
    missing_logprobs: int = 0  # samples without served log-probs (trained with ratio 1)
    # mean |trainer log-prob - served log-prob| before the update; ~0 when the endpoint
    # serves exactly the weights being trained (None: no served log-probs)
    served_logprob_gap: float | None = None

    def as_dict(self) -> dict:
        return asdict(self)


class TrainingBackend(Protocol):
    """Holds a policy and its optimizer across rounds."""

    config: TrainConfig

    def train(
        self, samples: Sequence[Sample], *, epochs: int | None = None, progress: Callable[[int, int], None] | None = None
    ) -> TrainMetrics:
        """Steps over ``samples`` (``progress(done, total)`` after each)."""
        ...

    def save(self, out_dir: str | os.PathLike, manifest: dict | None = None) -> Path:
        """Write a Hugging Face checkpoint and its manifest (via ``checkpoint_folder``); return its folder."""
        ...
