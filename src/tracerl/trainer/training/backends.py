"""The one way to get a trainer: the backend's class on a model folder.

Its own module, beside :mod:`~tracerl.trainer.training.backend` (the round of steps both
backends inherit), because each backend imports that base: a factory there would import the
backends back.
"""

from __future__ import annotations

import os

from tracerl.trainer.training.backend import PolicyGradientTrainer
from tracerl.trainer.training.config import BACKENDS, OpenRLHFOptions, TrainConfig


def load_trainer(
    backend: str, model_path: str | os.PathLike, config: TrainConfig | None = None, options: OpenRLHFOptions | None = None
) -> PolicyGradientTrainer:
    """The trainer of ``backend`` ("torch" or "openrlhf") on ``model_path``: every caller gets one here."""
    config = config or TrainConfig()
    if backend == "openrlhf":
        from tracerl.trainer.training.openrlhf_backend import OpenRLHFTrainer

        return OpenRLHFTrainer(model_path, config, options or OpenRLHFOptions())
    if backend == "torch":
        if options is not None and options != OpenRLHFOptions(lora_target_modules=options.lora_target_modules):
            raise ValueError("--ref-model, --kl-coef, --zero-stage and --adam-offload are options of --backend openrlhf")
        from tracerl.trainer.training.torch_backend import PolicyTrainer

        return PolicyTrainer(model_path, config)
    raise ValueError(f"unknown backend {backend!r}: use {' or '.join(BACKENDS)}")
