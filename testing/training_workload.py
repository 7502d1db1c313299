"""A round of training work of a chosen size, for the benchmarks that time the trainers.

Throughput and memory do not depend on which tokens are trained, so a round is random token ids
(past the tokenizer's special tokens) with advantages alternating +1 and -1; the model's size is
read from its safetensors headers without loading it.
"""

from __future__ import annotations

import math
from pathlib import Path

FIRST_ORDINARY_TOKEN = 300  # past the special tokens of the tokenizers tracerl builds locally


def random_round(vocab: int, samples: int, prompt_tokens: int, response_tokens: int, seed: int = 0) -> list:
    """``samples`` samples of random prompt and response ids, advantages +1, -1, +1, ... (seeded)."""
    import torch

    from tracerl.trainer.training.dataset import Sample

    generator = torch.Generator().manual_seed(seed)
    return [
        Sample(
            prompt_token_ids=torch.randint(FIRST_ORDINARY_TOKEN, vocab, (prompt_tokens,), generator=generator).tolist(),
            response_token_ids=torch.randint(FIRST_ORDINARY_TOKEN, vocab, (response_tokens,), generator=generator).tolist(),
            advantage=1.0 if i % 2 == 0 else -1.0,
        )
        for i in range(samples)
    ]


def stored_parameters(folder: Path) -> int:
    """Parameters stored in the folder's safetensors files (read from their headers, not loaded)."""
    from safetensors import safe_open

    total = 0
    for file in Path(folder).glob("*.safetensors"):
        with safe_open(file, "pt") as tensors:
            total += sum(math.prod(tensors.get_slice(name).get_shape()) for name in tensors.keys())
    return total
