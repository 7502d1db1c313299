"""Choosing the policy's calls: agents of a multi-agent system, a policy per group of agents, splits, policy versions."""

from __future__ import annotations

import pytest

from tracerl.pipeline import PipelineInputError, build_dataset, dataset_table
from tracerl.pipeline.options import parse_policies
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


def _routed(ep: str, checker_served_by: str, reward: float) -> list[dict]:
    """The SQL agents with two policies: the writer's and rewriter's calls go to adapter "writer", the checker's to
    ``checker_served_by`` (the right one is "checker")."""
    return [
        episode_span(ep, 0, 1000, task="q1"),
        llm_call(ep, "w", 10, 20, [1], [2], agent="writer", model="writer", version=3),
        llm_call(ep, "c", 30, 40, [3], [4], agent="checker", model=checker_served_by, version=1),
        llm_call(ep, "r", 50, 60, [5], [6], agent="rewriter", model="writer", version=3),
        reward_span(ep, "rw", 90, reward),
    ]


def test_each_policy_gets_its_agents_calls_that_it_served_and_credit_is_shared(data_dir, tmp_path):
    write_spans(data_dir, _routed("e1", "checker", 1.0) + _routed("e2", "writer", 0.0))
    policies = parse_policies(["writer=writer,rewriter", "checker=checker"])
    manifest = build_dataset(data_dir, tmp_path / "out", policies=policies)
    rows = dataset_table(tmp_path / "out").to_pylist()
    assert [(r["episode_id"], r["agent_name"], r["policy_name"], r["policy_version"]) for r in rows] == [
        ("e1", "writer", "writer", 3), ("e1", "checker", "checker", 1), ("e1", "rewriter", "writer", 3),
        ("e2", "writer", "writer", 3), ("e2", "rewriter", "writer", 3),
    ]
    # one episode's credit, whichever policy made the call: GRPO over the task's two episodes
    assert [r["advantage"] for r in rows] == [1.0, 1.0, 1.0, -1.0, -1.0]
    # the checker's call that adapter "writer" answered trains neither policy, and is reported
    assert manifest["counts"]["llm_calls"]["skipped"] == {"wrong_policy": 1}
    assert manifest["counts"]["llm_calls"]["wrong_policy"] == {"checker -> writer": 1}
    assert any("1 x checker -> writer" in w and "checker serves checker" in w for w in manifest["warnings"])


def test_a_policy_naming_an_agent_no_call_has_is_warned_with_the_names_seen(data_dir, tmp_path):
    write_spans(data_dir, _routed("e1", "checker", 1.0))
    manifest = build_dataset(data_dir, tmp_path / "out", policies={"writer": ("writer", "rewriter"), "checker": ("check_query",)})
    assert manifest["counts"]["llm_calls"]["policy_agents_unseen"] == {"checker": ["check_query"]}
    warning = next(w for w in manifest["warnings"] if "check_query" in w)
    assert warning.startswith("--policy checker names agent(s) no call has: check_query (agent names seen: ")
    assert all(agent in warning.split("seen: ")[1] for agent in ("writer", "checker", "rewriter"))
    assert manifest["counts"]["llm_calls"]["skipped"] == {"agent_filter": 1}  # the checker's call: no policy claims it


@pytest.mark.parametrize(("specs", "message"), [
    (["writer=writer", "checker=writer"], "agent 'writer' is claimed by two policies, 'writer' and 'checker'"),
    (["writer"], "write NAME=AGENT"),
    (["writer=a", "writer=b"], "policy 'writer' is given twice"),
    (["my writer=a"], "policy name 'my writer'"),
])
def test_policies_that_cannot_be_served_are_refused_before_reading_anything(specs, message):
    with pytest.raises(PipelineInputError, match=message):
        parse_policies(specs)


def test_agents_and_policies_together_are_refused(data_dir, tmp_path):
    write_spans(data_dir, _routed("e1", "checker", 1.0))
    with pytest.raises(PipelineInputError, match="give --agents or --policy, not both"):
        build_dataset(data_dir, tmp_path / "out", agents="writer", policies={"writer": ("writer",)})
