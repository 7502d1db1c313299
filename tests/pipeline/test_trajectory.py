"""Trajectory mode: calls whose prompt extends the previous prompt + response become one row."""

from __future__ import annotations

import pytest

from tracerl.pipeline import build_dataset, dataset_table
from tracerl_testing.span_builders import chat_episode, write_spans


def test_trajectory_mode_merges_calls_that_extend_the_previous_one(data_dir, tmp_path):
    write_spans(data_dir, chat_episode("e1"))
    build_dataset(data_dir, tmp_path / "out", trajectory=True, advantage="none")
    merged, alone = dataset_table(tmp_path / "out").to_pylist()
    assert merged["prompt_token_ids"] == [1, 2]
    assert merged["response_token_ids"] == [3, 4, 9, 9, 5]
    assert merged["response_mask"] == [1, 1, 0, 0, 1]  # the tool's tokens are not the policy's
    assert merged["response_logprobs"] == pytest.approx([-0.1, -0.2, 0.0, 0.0, -0.3])
    assert (merged["step"], alone["step"]) == (0, 2)
    assert (alone["prompt_token_ids"], alone["response_mask"]) == ([7], [1])
