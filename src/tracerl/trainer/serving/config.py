"""How the policy server decodes; kept apart from the engine so the CLI reads defaults without torch."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EngineConfig:
    """How the engine decodes; ``tracerl serve`` takes its option defaults from here."""

    max_batch_size: int = 64  # most sequences decoded together
    policy_version: int = 0  # version of the weights it starts with (e.g. restarting on round k's checkpoint)
    # Torch threads of the decoding thread only (None: torch's default). One, because a decode
    # step of a small model is a chain of tiny kernels: on a busy 2-core machine OpenMP's second
    # thread mostly spins, measured at 9 ms per step with one thread against 210 ms with two.
    num_threads: int | None = 1
    # Longest sequence (prompt + completion) served, as vLLM's --max-model-len; None: the model's
    # max_position_embeddings, and no more than that (positions beyond it were never trained).
    max_model_len: int | None = None
