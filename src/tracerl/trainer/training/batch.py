"""What every backend does the same way with a round's samples: their order, their tensors.

Both backends take minibatches in the order :func:`minibatch_order` draws from the
config's seed, and lay samples out with :func:`collate`, so that on the same samples and
weights they step through the same batches (the backend agreement tests rely on it).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch

from tracerl.trainer.training.dataset import Sample


def minibatch_order(n_samples: int, minibatch_size: int, generator: torch.Generator) -> Iterator[list[int]]:
    """One epoch: a seeded permutation of the samples, cut into minibatches."""
    order = torch.randperm(n_samples, generator=generator).tolist()
    for start in range(0, n_samples, minibatch_size):
        yield order[start : start + minibatch_size]


def collate(samples: Sequence[Sample], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded ids plus, per position, the target token's mask and served log-prob.

    Position ``t`` of ``action_mask``/``served_logprobs`` is about token ``t + 1`` (the
    logits at ``t`` predict it), the layout of :func:`token_logprobs`; ``first_response``
    is the first position any row's response takes (the ones before are prompts only).
    """
    width = max(len(s.prompt_token_ids) + len(s.response_token_ids) for s in samples)
    ids = torch.full((len(samples), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(samples), width), dtype=torch.long)
    action_mask = torch.zeros((len(samples), width - 1))
    for i, s in enumerate(samples):
        seq = list(s.prompt_token_ids) + list(s.response_token_ids)
        ids[i, : len(seq)] = torch.tensor(seq)
        attention[i, : len(seq)] = 1
        start, end = response_span(s)
        mask = s.response_mask if s.response_mask is not None else [1] * len(s.response_token_ids)
        action_mask[i, start:end] = torch.tensor(mask, dtype=torch.float)
    served = response_columns(samples, [s.response_logprobs for s in samples], width)
    has_served = torch.tensor([s.response_logprobs is not None for s in samples], dtype=torch.bool)
    first_response = torch.tensor(min(response_span(s)[0] for s in samples), dtype=torch.long)
    return {"ids": ids, "attention": attention, "action_mask": action_mask, "served_logprobs": served, "has_served": has_served,
            "first_response": first_response}


def response_columns(samples: Sequence[Sample], values: Sequence[Sequence[float] | None], width: int) -> torch.Tensor:
    """Per-sample response-token values (log-probs) in the columns of a collated batch ``width`` wide; zeros elsewhere."""
    out = torch.zeros((len(samples), width - 1))
    for i, (s, row) in enumerate(zip(samples, values)):
        if row is not None:
            start, end = response_span(s)
            out[i, start:end] = torch.tensor(row)
    return out


def response_span(sample: Sample) -> tuple[int, int]:
    """Columns of a collated row whose log-probs are the response tokens'."""
    start = len(sample.prompt_token_ids) - 1
    return start, start + len(sample.response_token_ids)


def served_logprob_gap(samples: Sequence[Sample], trainer_logprobs: Sequence[Sequence[float]]) -> float | None:
    """Mean |trainer log-prob - served log-prob| over the action tokens the server logged.

    Right after a publish it is ~0 when the endpoint serves exactly what was trained;
    None when no sample carries served log-probs.
    """
    total, count = 0.0, 0
    for sample, mine in zip(samples, trainer_logprobs):
        if sample.response_logprobs is None:
            continue
        mask = sample.response_mask or [1] * len(mine)
        for a, b, m in zip(mine, sample.response_logprobs, mask):
            if m:
                total += abs(a - b)
                count += 1
    return total / count if count else None
