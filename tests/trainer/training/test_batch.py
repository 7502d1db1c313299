"""How a micro-batch is laid out for the model and the objective, and where the round's start log-probs are kept."""

from __future__ import annotations

import pytest
import torch

from tracerl.trainer.training.batch import ResponseLogprobs, collate, served_logprob_gap
from tracerl.trainer.training.samples import Sample, SampleColumns

PAD = 0
SAMPLES = SampleColumns.from_samples([
    Sample([11, 12], [13, 14, 15], 1.0, response_logprobs=[-0.5, -1.5, -2.5], response_mask=[1, 0, 1]),
    Sample([21, 22, 23], [24], -0.5),
    Sample([31], [32, 33], 0.25, response_logprobs=[-0.75, -1.25], target_only=True),
])


def test_a_batch_is_right_padded_ids_and_per_position_the_target_tokens_values():
    """Column t of the per-position tensors is about token t + 1, the one the logits at t predict."""
    batch = collate(SAMPLES, [1, 0], PAD)
    assert batch["ids"].tolist() == [[21, 22, 23, 24, 0], [11, 12, 13, 14, 15]]
    assert batch["attention"].tolist() == [[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]
    # sample 1's response token 24 is predicted at position 2; sample 0's 13, 14, 15 at 1, 2, 3
    assert batch["action_mask"].tolist() == [[0, 0, 1, 0], [0, 1, 0, 1]]
    assert batch["served_logprobs"].tolist() == [[0, 0, 0, 0], [0, -0.5, -1.5, -2.5]]
    assert batch["has_served"].tolist() == [False, True]
    # each action position's index among the round's response tokens (13 14 15 | 24 | 32 33), -1 elsewhere
    assert batch["response_index"].tolist() == [[-1, -1, 3, -1], [-1, 0, 1, 2]]
    assert int(batch["first_response"]) == 1
    assert batch["advantages"].tolist() == [-0.5, 1.0] and batch["target_only"].tolist() == [False, False]
    assert batch["ids"].dtype == torch.long and batch["action_mask"].dtype == batch["served_logprobs"].dtype == torch.float32


def test_start_log_probs_are_stored_from_one_batch_and_read_in_another():
    start = ResponseLogprobs(SAMPLES, torch.device("cpu"))
    first = collate(SAMPLES, [0, 2], PAD)
    positions = torch.arange(first["ids"].shape[1] - 1, dtype=torch.float32)
    start.store([0, 2], first, -positions.expand(2, -1) - torch.tensor([[0.0], [10.0]]))  # a stand-in for the model's log-probs
    assert start.known.tolist() == [True, False, True]
    assert start.per_sample() == [[-1.0, -2.0, -3.0], [0.0], [-10.0, -11.0]]
    again = collate(SAMPLES, [2, 1, 0], PAD)  # other rows, other widths: the same tokens' values
    assert start.columns(again).tolist() == [[-10, -11, 0, 0], [0, 0, 0, 0], [0, -1, -2, -3]]


def test_the_served_gap_is_over_the_action_tokens_the_server_logged():
    start = ResponseLogprobs(SAMPLES, torch.device("cpu"))
    start.values[:] = torch.tensor([-0.5, -9.0, -2.0, -7.0, -1.0, -1.0])
    # sample 0: |0|, masked out, |0.5|; sample 1 logged none; sample 2: |0.25|, |0.25|
    assert served_logprob_gap(SAMPLES, start) == pytest.approx(1.0 / 4)
    assert served_logprob_gap(SAMPLES.take([1]), ResponseLogprobs(SAMPLES.take([1]), torch.device("cpu"))) is None
