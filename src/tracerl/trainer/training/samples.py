"""A round's samples: one :class:`Sample` per LLM call, held by the trainer as columns (:class:`SampleColumns`).

A round is tens of thousands of calls of thousands of tokens. Held as Python lists, every token
is a Python object: reading the dataset, sorting it and laying out each micro-batch cost more
than they need to, again every epoch. :class:`SampleColumns` keeps each ragged field as one flat
numpy array and the offsets where each sample's part starts (the layout of an Arrow list
column), so a micro-batch's tensors are gathered from slices of those arrays
(:func:`~tracerl.trainer.training.batch.collate`), and the dataset's columns are read into it
without a copy. It is a sequence of :class:`Sample`, made on access, so code that picks or
inspects samples one by one keeps working on it; code that builds samples by hand makes
:class:`Sample` lists, which the trainer packs once per round (:meth:`SampleColumns.from_samples`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import overload

import numpy as np

__all__ = ["Sample", "SampleColumns", "object_column", "ragged_positions"]


@dataclass
class Sample:
    """One LLM call to learn from. Field names are ``DATASET_SCHEMA`` column names."""

    prompt_token_ids: list[int]
    response_token_ids: list[int]
    advantage: float
    # log-probs the server sampled with (the behaviour policy), None when it logged none
    response_logprobs: list[float] | None = None
    response_mask: list[int] | None = None  # 1 where the token is the policy's action
    policy_version: int | None = None  # the version that sampled it
    policy_name: str | None = None  # the policy (served model name) that sampled it
    target_only: bool = False  # supervised sample (warm start): advantage is ignored


def ragged_positions(offsets: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Where the elements of ``rows`` lie in a flat array cut by ``offsets`` (row i is ``offsets[i]:offsets[i + 1]``),
    one row after another: the gather that takes those rows, without a Python loop over them."""
    starts = offsets[rows]
    lengths = offsets[rows + 1] - starts
    output_starts = np.cumsum(lengths) - lengths
    return np.repeat(starts - output_starts, lengths) + np.arange(int(lengths.sum()), dtype=np.int64)


@dataclass(eq=False)
class SampleColumns(Sequence[Sample]):
    """Samples as columns: ragged fields flat with their offsets, the rest one entry per sample.

    The log-probs and the mask, when a sample has them, are as long as its response, so they are
    held aligned with ``response_ids`` (they share ``response_offsets``); a sample without them has
    zeros and ones there, and ``has_served``/``has_mask`` False.
    """

    prompt_ids: np.ndarray  # every sample's prompt ids, one after another
    prompt_offsets: np.ndarray  # int64, one more than the samples: sample i's prompt is prompt_ids[o[i]:o[i + 1]]
    response_ids: np.ndarray
    response_offsets: np.ndarray
    served_logprobs: np.ndarray  # float64, per response token
    has_served: np.ndarray  # bool, per sample
    response_mask: np.ndarray  # per response token
    has_mask: np.ndarray  # bool, per sample
    advantage: np.ndarray  # float64, per sample
    policy_version: np.ndarray  # object (int or None), per sample
    policy_name: np.ndarray  # object (str or None), per sample
    target_only: np.ndarray  # bool, per sample

    def __post_init__(self) -> None:
        n = len(self.advantage)
        for name, offsets, values in (("prompt", self.prompt_offsets, self.prompt_ids), ("response", self.response_offsets, self.response_ids)):
            if len(offsets) != n + 1 or offsets[0] != 0 or offsets[-1] != len(values):
                raise ValueError(f"{name} offsets do not cut {len(values)} ids into {n} samples")
        for name in ("served_logprobs", "response_mask"):
            if len(getattr(self, name)) != len(self.response_ids):
                raise ValueError(f"{name} holds {len(getattr(self, name))} values for {len(self.response_ids)} response tokens")
        empty = np.flatnonzero(self.prompt_lengths == 0)
        if len(empty):
            raise ValueError(f"sample {empty[0]} has an empty prompt ({len(empty)} do): no position predicts its first response token")

    # --- the sequence of samples ---------------------------------------------------------
    def __len__(self) -> int:
        return len(self.advantage)

    @overload
    def __getitem__(self, index: int) -> Sample: ...
    @overload
    def __getitem__(self, index: slice) -> SampleColumns: ...

    def __getitem__(self, index):
        if isinstance(index, slice):
            return self.take(np.arange(len(self))[index])
        i = range(len(self))[index]  # negative from the end, IndexError past it, as a list's
        p0, p1 = self.prompt_offsets[i], self.prompt_offsets[i + 1]
        r0, r1 = self.response_offsets[i], self.response_offsets[i + 1]
        return Sample(
            prompt_token_ids=self.prompt_ids[p0:p1].tolist(), response_token_ids=self.response_ids[r0:r1].tolist(),
            advantage=float(self.advantage[i]),
            response_logprobs=self.served_logprobs[r0:r1].tolist() if self.has_served[i] else None,
            response_mask=self.response_mask[r0:r1].tolist() if self.has_mask[i] else None,
            policy_version=self.policy_version[i], policy_name=self.policy_name[i], target_only=bool(self.target_only[i]),
        )

    def __iter__(self) -> Iterator[Sample]:
        return (self[i] for i in range(len(self)))

    def __add__(self, other: Sequence[Sample]) -> SampleColumns:
        """These samples, then ``other``'s (a round's dataset rows plus replayed samples)."""
        if not isinstance(other, Sequence):
            return NotImplemented
        return _concatenate(self, SampleColumns.from_samples(other))

    # --- what the trainer reads ----------------------------------------------------------
    @cached_property
    def prompt_lengths(self) -> np.ndarray:
        return np.diff(self.prompt_offsets)

    @cached_property
    def response_lengths(self) -> np.ndarray:
        return np.diff(self.response_offsets)

    @cached_property
    def lengths(self) -> np.ndarray:
        """Each sample's tokens, prompt and response: the width of its row in a batch."""
        return self.prompt_lengths + self.response_lengths

    def take(self, rows: Sequence[int] | np.ndarray) -> SampleColumns:
        """The samples at ``rows``, in that order."""
        rows = np.asarray(rows, dtype=np.int64)
        prompt = ragged_positions(self.prompt_offsets, rows)
        response = ragged_positions(self.response_offsets, rows)
        return SampleColumns(
            prompt_ids=self.prompt_ids[prompt], prompt_offsets=_offsets(self.prompt_lengths[rows]),
            response_ids=self.response_ids[response], response_offsets=_offsets(self.response_lengths[rows]),
            served_logprobs=self.served_logprobs[response], has_served=self.has_served[rows],
            response_mask=self.response_mask[response], has_mask=self.has_mask[rows], advantage=self.advantage[rows],
            policy_version=self.policy_version[rows], policy_name=self.policy_name[rows], target_only=self.target_only[rows],
        )

    @classmethod
    def from_samples(cls, samples: Sequence[Sample]) -> SampleColumns:
        """``samples`` as columns (as they are, when they already are).

        Raises ValueError naming the sample whose log-probs or mask are not as long as its response.
        """
        if isinstance(samples, SampleColumns):
            return samples
        response_lengths = np.array([len(s.response_token_ids) for s in samples], dtype=np.int64)
        for i, (s, length) in enumerate(zip(samples, response_lengths)):
            for name in ("response_logprobs", "response_mask"):
                values = getattr(s, name)
                if values is not None and len(values) != length:
                    raise ValueError(f"sample {i}: {len(values)} {name} for {length} response tokens")
        return cls(
            prompt_ids=_flat([s.prompt_token_ids for s in samples], np.int64),
            prompt_offsets=_offsets(np.array([len(s.prompt_token_ids) for s in samples], dtype=np.int64)),
            response_ids=_flat([s.response_token_ids for s in samples], np.int64), response_offsets=_offsets(response_lengths),
            served_logprobs=_flat([s.response_logprobs if s.response_logprobs is not None else np.zeros(n) for s, n in zip(samples, response_lengths)], np.float64),
            has_served=np.array([s.response_logprobs is not None for s in samples], dtype=bool),
            response_mask=_flat([s.response_mask if s.response_mask is not None else np.ones(n) for s, n in zip(samples, response_lengths)], np.int64),
            has_mask=np.array([s.response_mask is not None for s in samples], dtype=bool),
            advantage=np.array([s.advantage for s in samples], dtype=np.float64),
            policy_version=object_column([s.policy_version for s in samples]), policy_name=object_column([s.policy_name for s in samples]),
            target_only=np.array([s.target_only for s in samples], dtype=bool),
        )


def _concatenate(first: SampleColumns, second: SampleColumns) -> SampleColumns:
    return SampleColumns(
        prompt_ids=np.concatenate([first.prompt_ids, second.prompt_ids]),
        prompt_offsets=_offsets(np.concatenate([first.prompt_lengths, second.prompt_lengths])),
        response_ids=np.concatenate([first.response_ids, second.response_ids]),
        response_offsets=_offsets(np.concatenate([first.response_lengths, second.response_lengths])),
        **{name: np.concatenate([getattr(first, name), getattr(second, name)])
           for name in ("served_logprobs", "has_served", "response_mask", "has_mask", "advantage", "policy_version", "policy_name", "target_only")},
    )


def _offsets(lengths: np.ndarray) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)])


def _flat(rows: Sequence[Sequence], dtype: type) -> np.ndarray:
    return np.concatenate([np.asarray(row, dtype=dtype) for row in rows]) if len(rows) else np.empty(0, dtype=dtype)


def object_column(values: list) -> np.ndarray:
    """A per-sample column of Python values (ints or strings, None where missing), kept as they are."""
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out
