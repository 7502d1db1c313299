"""Automatic intermediate rewards: default rules, rule files, and where each penalty lands."""

from __future__ import annotations

import pytest

from tracerl.pipeline import PipelineInputError, build_dataset, dataset_table
from tracerl.schemas import attributes as A
from tracerl_testing.span_builders import episode_span, llm_call, reward_span, tool_span, write_spans

BAD_TOOL_CALL = '[{"role":"assistant","parts":[{"type":"tool_call","name":"calc","arguments":"{not json"}]}]'


def _episode(tool: dict, second_call_extra: dict | None = None) -> list[dict]:
    return [
        episode_span("e1", 0, 1000, task="t"),
        llm_call("e1", "c0", 10, 20, [1], [2]),
        tool,  # started after c0 ended: c0 requested it
        llm_call("e1", "c1", 40, 50, [1, 2, 3], [4], extra=second_call_extra),
        reward_span("e1", "r", 60, 1.0),
    ]


def _by_step(out) -> list[float]:
    return [r["reward"] for r in dataset_table(out).to_pylist()]


def test_failing_tool_penalises_the_call_that_requested_it(data_dir, tmp_path):
    write_spans(data_dir, _episode(tool_span("e1", "tool", 25, 30, status="ERROR")))
    manifest = build_dataset(data_dir, tmp_path / "out", advantage="none")
    assert _by_step(tmp_path / "out") == [pytest.approx(-0.1), 1.0]
    assert manifest["counts"]["rewards"]["by_name"] == {"air.tool_error": 1, "reward": 1}


def test_sql_tool_returning_an_error(data_dir, tmp_path):
    write_spans(data_dir, _episode(tool_span("e1", "tool", 25, 30, "run_sql", result="Error: no such table: users")))
    build_dataset(data_dir, tmp_path / "out", advantage="none")
    assert _by_step(tmp_path / "out") == [pytest.approx(-0.1), 1.0]


def test_tool_call_that_does_not_parse_penalises_the_call_itself(data_dir, tmp_path):
    write_spans(data_dir, _episode(tool_span("e1", "tool", 25, 30), {A.GEN_AI_OUTPUT_MESSAGES: BAD_TOOL_CALL}))
    build_dataset(data_dir, tmp_path / "out", advantage="none")
    assert _by_step(tmp_path / "out") == [0.0, pytest.approx(1.0 - 0.1)]


def test_a_timed_out_tool_counts_as_failed_and_timed_out(data_dir, tmp_path):
    write_spans(data_dir, _episode(tool_span("e1", "tool", 25, 30, status="ERROR", status_message="Read timed out")))
    manifest = build_dataset(data_dir, tmp_path / "out", advantage="none")
    assert _by_step(tmp_path / "out") == [pytest.approx(-0.2), 1.0]
    assert set(manifest["counts"]["rewards"]["by_name"]) == {"air.tool_error", "air.timeout", "reward"}


def test_discounted_credit_spreads_penalty_and_outcome_by_hand(data_dir, tmp_path):
    # rewards per call: c0 -0.1 (its tool failed), c1 +1.0; gamma 0.5:
    #   G1 = 1.0, G0 = -0.1 + 0.5 * 1.0 = 0.4
    write_spans(data_dir, _episode(tool_span("e1", "tool", 25, 30, status="ERROR")))
    build_dataset(data_dir, tmp_path / "out", credit="discounted", gamma=0.5, advantage="none")
    rows = dataset_table(tmp_path / "out").to_pylist()
    assert [r["return"] for r in rows] == [pytest.approx(0.4), pytest.approx(1.0)]
    assert [r["advantage"] for r in rows] == [pytest.approx(0.4), pytest.approx(1.0)]


def test_rules_file_reweights_adds_and_defaults_can_be_switched_off(data_dir, tmp_path):
    write_spans(data_dir, _episode(tool_span("e1", "tool", 25, 30, status="ERROR")))
    rules = tmp_path / "rules.toml"
    rules.write_text(
        '[[rules]]\nname = "tool_error"\nwhere = "is_tool AND status_code = \'ERROR\'"\nvalue = -0.5\n\n'
        '[[rules]]\nname = "long_call"\nwhere = "is_llm AND end_time_unix_nano - start_time_unix_nano >= 10000"\n'
        'value = -0.01\ntarget = "self"\n'
    )
    build_dataset(data_dir, tmp_path / "a", advantage="none", rules=str(rules))
    assert _by_step(tmp_path / "a") == [pytest.approx(-0.5 - 0.01), pytest.approx(1.0 - 0.01)]
    build_dataset(data_dir, tmp_path / "b", advantage="none", default_rules=False)
    assert _by_step(tmp_path / "b") == [0.0, 1.0]


def test_a_rule_that_is_not_valid_sql_names_the_rule(data_dir, tmp_path):
    write_spans(data_dir, _episode(tool_span("e1", "tool", 25, 30)))
    rules = tmp_path / "rules.json"
    rules.write_text('[{"name": "typo", "where": "no_such_column = 1", "value": 1}]')
    with pytest.raises(PipelineInputError, match="AIR rule 'typo'"):
        build_dataset(data_dir, tmp_path / "out", rules=str(rules))


def test_a_failing_tool_span_delivered_twice_is_penalised_once(data_dir, tmp_path):
    rows = _episode(tool_span("e1", "tool", 25, 30, status="ERROR"))
    write_spans(data_dir, rows)
    write_spans(data_dir, [rows[2]])  # an exporter retry wrote the tool span again
    manifest = build_dataset(data_dir, tmp_path / "out", advantage="none")
    assert _by_step(tmp_path / "out") == [pytest.approx(-0.1), 1.0]
    assert manifest["counts"]["rewards"]["by_name"] == {"air.tool_error": 1, "reward": 1}
