"""What every backend does the same way with a round's samples: their order, their tensors.

Both backends take minibatches in the order :func:`minibatch_order` draws from the
config's seed, and lay samples out with :func:`collate`, so that on the same samples and
weights they step through the same batches (the backend agreement tests rely on it).

A micro-batch's tensors are gathered from the round's :class:`SampleColumns` by array
indexing, and the log-probs a round starts from are kept as one tensor over the round's
response tokens (:class:`ResponseLogprobs`): no token goes through a Python list on its way to
the model or back, however many epochs read it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import torch

from tracerl.trainer.training.samples import SampleColumns


def minibatch_order(n_samples: int, minibatch_size: int, generator: torch.Generator) -> Iterator[list[int]]:
    """One epoch: a seeded permutation of the samples, cut into minibatches."""
    order = torch.randperm(n_samples, generator=generator).tolist()
    for start in range(0, n_samples, minibatch_size):
        yield order[start : start + minibatch_size]


def collate(samples: SampleColumns, rows: Sequence[int], pad_id: int) -> dict[str, torch.Tensor]:
    """The samples at ``rows`` as a batch: right-padded ids plus, per position, what the objective needs of its target.

    Position ``t`` of ``action_mask``/``served_logprobs``/``response_index`` is about token ``t + 1`` (the
    logits at ``t`` predict it), the layout of :func:`token_logprobs`. ``response_index`` is that token's
    index among the round's response tokens (``samples.response_ids``), -1 where it is a prompt token or
    padding: it is where :class:`ResponseLogprobs` stores and reads the position's log-prob.
    ``first_response`` is the first position any row's response takes (the ones before are prompts only);
    ``advantages`` and ``target_only`` are per row.
    """
    rows = np.asarray(rows, dtype=np.int64)
    prompt_lengths = samples.prompt_lengths[rows][:, None]
    lengths = samples.lengths[rows][:, None]
    position = np.arange(int(lengths.max()))
    in_prompt = position < prompt_lengths
    in_response = ~in_prompt & (position < lengths)
    ids = np.full(in_prompt.shape, pad_id, dtype=np.int64)
    ids[in_prompt] = samples.prompt_ids[(samples.prompt_offsets[rows][:, None] + position)[in_prompt]]
    token_index = samples.response_offsets[rows][:, None] + position - prompt_lengths  # at the response's positions
    ids[in_response] = samples.response_ids[token_index[in_response]]
    response_index = np.where(in_response[:, 1:], token_index[:, 1:], -1)
    is_action = response_index >= 0
    action_mask = np.zeros(response_index.shape, dtype=np.float32)
    action_mask[is_action] = samples.response_mask[response_index[is_action]]
    has_served = samples.has_served[rows]
    with_served = is_action & has_served[:, None]
    served = np.zeros(response_index.shape, dtype=np.float32)
    served[with_served] = samples.served_logprobs[response_index[with_served]]
    return {
        "ids": torch.from_numpy(ids), "attention": torch.from_numpy((position < lengths).astype(np.int64)),
        "action_mask": torch.from_numpy(action_mask), "served_logprobs": torch.from_numpy(served), "has_served": torch.from_numpy(has_served),
        "first_response": torch.tensor(int(prompt_lengths.min()) - 1, dtype=torch.long), "response_index": torch.from_numpy(response_index),
        "advantages": torch.from_numpy(samples.advantage[rows].astype(np.float32)), "target_only": torch.from_numpy(samples.target_only[rows]),
    }


class ResponseLogprobs:
    """Log-probs of a round's response tokens under one set of weights, one tensor laid out as ``samples.response_ids``.

    The round's start log-probs (the proximal policy PPO clips against) are filled micro-batch by
    micro-batch, some in a pass of their own and some by the first minibatch's training pass, and read
    back by every epoch: each store and read is one indexing of this tensor, on the training device.
    """

    def __init__(self, samples: SampleColumns, device: torch.device) -> None:
        self.values = torch.zeros(len(samples.response_ids), dtype=torch.float32, device=device)
        self.known = np.zeros(len(samples), dtype=bool)  # per sample: whether its log-probs are stored yet
        self._offsets = samples.response_offsets

    def store(self, rows: Sequence[int], batch: dict[str, torch.Tensor], logprobs: torch.Tensor) -> None:
        """Keep the response tokens' log-probs of ``logprobs``, the positions of ``batch`` (the samples at ``rows``, collated)."""
        index = batch["response_index"]
        at = index >= 0
        self.values[index[at]] = logprobs.detach().float()[at]
        self.known[list(rows)] = True

    def columns(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The stored log-probs in the positions of ``batch``; zeros where no response token is predicted."""
        index = batch["response_index"]
        at = index >= 0
        out = torch.zeros(index.shape, dtype=torch.float32, device=index.device)
        out[at] = self.values[index[at]]
        return out

    def per_sample(self) -> list[list[float]]:
        """Each sample's response-token log-probs, as lists (what callers comparing them with a server's take)."""
        flat = self.values.cpu().tolist()
        return [flat[start:end] for start, end in zip(self._offsets[:-1].tolist(), self._offsets[1:].tolist())]


def served_logprob_gap(samples: SampleColumns, trainer_logprobs: ResponseLogprobs) -> float | None:
    """Mean |trainer log-prob - served log-prob| over the action tokens the server logged.

    Right after a publish it is ~0 when the endpoint serves exactly what was trained;
    None when no sample carries served log-probs.
    """
    counted = np.repeat(samples.has_served, samples.response_lengths) & (samples.response_mask != 0)
    if not counted.any():
        return None
    mine = trainer_logprobs.values.cpu().numpy().astype(np.float64)
    gaps = np.abs(mine[counted] - samples.served_logprobs[counted])
    # summed in order, one token after another: a pairwise sum (np.sum) differs in the last digits from run records
    return float(np.cumsum(gaps)[-1] / len(gaps))
