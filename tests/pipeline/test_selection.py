"""Choosing the policy's calls: agents of a multi-agent system, splits, policy versions."""

from __future__ import annotations

import pytest

from tracerl.pipeline import PipelineInputError, build_dataset, dataset_table
from tracerl.pipeline.selection import policy_version_predicate
from tracerl_testing.span_builders import episode_span, llm_call, reward_span, write_spans


def _sql_agents(ep: str, split: str = "train") -> list[dict]:
    # Spider-like: writer, checker, rewriter; the reward arrives after the checker's last call
    return [
        episode_span(ep, 0, 1000, task="q1", attrs={"tracerl.split": split}),
        llm_call(ep, "w", 10, 20, [1], [2], agent="writer", version=1),
        llm_call(ep, "c", 30, 40, [3], [4], agent="checker", version=2),
        llm_call(ep, "r", 50, 60, [5], [6], agent="rewriter", version=2),
        llm_call(ep, "c2", 70, 80, [7], [8], agent="checker", version=2),
        reward_span(ep, "rw", 90, 1.0),
    ]


def test_only_chosen_agents_are_trained_and_rewards_go_to_their_last_call(data_dir, tmp_path):
    write_spans(data_dir, _sql_agents("e1"))
    manifest = build_dataset(data_dir, tmp_path / "out", agents="^(writer|rewriter)$", advantage="none")
    rows = dataset_table(tmp_path / "out").to_pylist()
    assert [(r["agent_name"], r["step"], r["reward"]) for r in rows] == [("writer", 0, 0.0), ("rewriter", 1, 1.0)]
    assert manifest["counts"]["llm_calls"]["skipped"] == {"agent_filter": 2}


def test_policy_version_and_split_filters(data_dir, tmp_path):
    write_spans(data_dir, _sql_agents("e1") + _sql_agents("e2", split="test"))
    manifest = build_dataset(data_dir, tmp_path / "out", policy_versions=">=2", splits=("train",))
    rows = dataset_table(tmp_path / "out").to_pylist()
    assert {r["episode_id"] for r in rows} == {"e1"} and {r["policy_version"] for r in rows} == {2}
    assert manifest["counts"]["llm_calls"]["skipped"] == {"policy_version_filter": 1, "split_filter": 4}


def test_policy_version_specs():
    assert policy_version_predicate("3") == "(policy_version = 3)"
    assert policy_version_predicate("3, >=5") == "(policy_version = 3 OR policy_version >= 5)"
    with pytest.raises(PipelineInputError, match="--policy-versions"):
        policy_version_predicate("latest")


def test_invalid_agent_regex_is_a_clear_error(data_dir, tmp_path):
    write_spans(data_dir, _sql_agents("e1"))
    with pytest.raises(PipelineInputError, match="not a valid regular expression"):
        build_dataset(data_dir, tmp_path / "out", agents="(writer")
