"""A round's samples as columns: the same samples as the list they were packed from, in flat arrays."""

from __future__ import annotations

import numpy as np
import pytest

from tracerl.trainer.training.samples import Sample, SampleColumns, ragged_positions

SAMPLES = [
    Sample([1, 2, 3], [4, 5], 1.0, response_logprobs=[-0.5, -0.25], response_mask=[1, 0], policy_version=3, policy_name="a"),
    Sample([6], [7], -1.0),
    Sample([8, 9], [10, 11, 12], 0.5, response_logprobs=[-1.0, -2.0, -3.0], target_only=True),
]


def test_columns_hold_the_samples_they_were_packed_from():
    columns = SampleColumns.from_samples(SAMPLES)
    assert len(columns) == 3 and list(columns) == SAMPLES and columns[-1] == SAMPLES[-1]
    assert columns.prompt_ids.tolist() == [1, 2, 3, 6, 8, 9] and columns.prompt_offsets.tolist() == [0, 3, 4, 6]
    assert columns.lengths.tolist() == [5, 2, 5]
    # log-probs and mask are laid out as the response ids: a sample without them has 0s and 1s there
    assert columns.served_logprobs.tolist() == [-0.5, -0.25, 0.0, -1.0, -2.0, -3.0] and columns.has_served.tolist() == [True, False, True]
    assert columns.response_mask.tolist() == [1, 0, 1, 1, 1, 1] and columns.has_mask.tolist() == [True, False, False]
    assert SampleColumns.from_samples(columns) is columns
    with pytest.raises(IndexError):
        columns[3]


def test_taking_slicing_and_adding_give_columns_of_those_samples():
    columns = SampleColumns.from_samples(SAMPLES)
    assert list(columns.take([2, 0])) == [SAMPLES[2], SAMPLES[0]]
    assert list(columns[1:]) == SAMPLES[1:]
    extra = Sample([13], [14], 2.0)
    added = columns + [extra]  # a round's dataset rows plus replayed samples
    assert isinstance(added, SampleColumns) and list(added) == [*SAMPLES, extra]
    assert list(columns + []) == SAMPLES


def test_log_probs_or_a_mask_not_as_long_as_the_response_name_the_sample():
    with pytest.raises(ValueError, match="sample 1: 1 response_logprobs for 2 response tokens"):
        SampleColumns.from_samples([SAMPLES[0], Sample([1], [2, 3], 1.0, response_logprobs=[-1.0])])
    with pytest.raises(ValueError, match="sample 0: 3 response_mask for 2 response tokens"):
        SampleColumns.from_samples([Sample([1], [2, 3], 1.0, response_mask=[1, 1, 1])])


def test_an_empty_prompt_is_refused():
    """Position t's logits predict token t + 1: with no prompt, nothing predicts the first response token."""
    with pytest.raises(ValueError, match="sample 1 has an empty prompt"):
        SampleColumns.from_samples([SAMPLES[0], Sample([], [2], 1.0)])


def test_ragged_positions_gather_whole_rows_in_the_order_asked():
    offsets = np.array([0, 3, 3, 5, 6])  # rows of 3, 0, 2 and 1 values
    assert ragged_positions(offsets, np.array([2, 0, 1, 3])).tolist() == [3, 4, 0, 1, 2, 5]
    assert ragged_positions(offsets, np.array([], dtype=np.int64)).tolist() == []
