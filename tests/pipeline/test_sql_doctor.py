"""`tracerl sql` views and example queries; `pipeline doctor` explanations."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from tracerl.cli import app
from tracerl.pipeline import build_dataset
from tracerl.pipeline.sql import EXAMPLES, open_views
from tracerl_testing.span_builders import episode_span, llm_call, reward_span, tool_span, write_spans


def _spans(data_dir):
    rows = []
    for ep, reward in (("e1", 1.0), ("e2", 0.0)):
        rows += [episode_span(ep, 0, 100, task="t1"), llm_call(ep, "c1", 1, 10, [1, 2], [3], agent="solver"),
                 tool_span(ep, "tool", 11, 12, status="ERROR"), llm_call(ep, "c2", 13, 20, [1], [4], agent="solver"),
                 reward_span(ep, "r", 30, reward)]
    rows += [episode_span("e3", 0, 100, task="t2"), llm_call("e3", "c1", 1, 10, None, None)]  # no tokens, no reward
    return write_spans(data_dir, rows)


def test_views_answer_questions_about_the_data(data_dir):
    _spans(data_dir)
    con = open_views(data_dir)
    assert con.sql("SELECT count(*) FROM spans").fetchall() == [(12,)]
    assert con.sql("SELECT count(*) FILTER (WHERE has_tokens), count(*) FROM llm_calls").fetchall() == [(4, 5)]
    assert con.sql("SELECT name, count(*) FROM rewards WHERE source = 'air' GROUP BY 1").fetchall() == [("air.tool_error", 2)]
    assert con.sql("SELECT count(*) FROM transitions").fetchall() == [(4,)]  # not built yet: what would be
    for title, query in EXAMPLES:  # every documented example runs
        con.sql(query).fetchall()


def test_sql_command_runs_one_query_over_a_built_dataset(data_dir, tmp_path):
    _spans(data_dir)
    build_dataset(data_dir, data_dir / "dataset")
    result = CliRunner().invoke(app, ["sql", str(data_dir), "-c", 'SELECT episode_id, "return" FROM transitions ORDER BY 1, step', "--format", "json"])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.output.strip().splitlines()]
    assert [(r["episode_id"], r["return"]) for r in lines] == [("e1", 0.9), ("e1", 0.9), ("e2", -0.1), ("e2", -0.1)]
    bad = CliRunner().invoke(app, ["sql", str(data_dir), "-c", "SELECT nope FROM spans"])
    assert bad.exit_code == 2 and "query failed" in bad.output


def test_doctor_names_task_groups_of_one_episode_and_the_choices(data_dir):
    write_spans(data_dir, [row for ep, task in (("e1", "t1"), ("e2", "t2")) for row in
                           (episode_span(ep, 0, 100, task=task), llm_call(ep, "c1", 1, 10, [1], [2]), reward_span(ep, "r", 30, 1.0))])
    report = json.loads(CliRunner().invoke(app, ["pipeline", "doctor", "--spans", str(data_dir), "--json"]).output)
    assert any(n.startswith("all 2 task group(s) hold a single episode, so --advantage grpo") for n in report["notes"])
    none = CliRunner().invoke(app, ["pipeline", "doctor", "--spans", str(data_dir), "--advantage", "none", "--json"])
    assert none.exit_code == 0, none.output
    assert not [n for n in json.loads(none.output)["notes"] if "single episode" in n]


def test_sql_examples_need_no_data():
    result = CliRunner().invoke(app, ["sql", "--examples"])
    assert result.exit_code == 0, result.output
    assert all(f"-- {title}" in result.output for title, _ in EXAMPLES)
    missing = CliRunner().invoke(app, ["sql", "-c", "SELECT 1"])
    assert missing.exit_code == 2 and "--examples" in missing.output


def test_doctor_explains_every_loss_with_counts(data_dir):
    _spans(data_dir)
    result = CliRunner().invoke(app, ["pipeline", "doctor", "--spans", str(data_dir), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    funnel = dict(report["funnel"])
    assert (funnel["LLM calls"], funnel["transitions"]) == (5, 4)
    assert "1 LLM call(s) in episodes with no reward (emit tracerl.reward or pass --rewards)" in report["notes"]
    # e1 and e2 share task t1; e3 (task t2) has no reward, so no group of one
    assert not [n for n in report["notes"] if "single episode" in n]
    result = CliRunner().invoke(app, ["pipeline", "doctor", "--spans", str(data_dir), "--agents", "planner"])
    assert "--agents 'planner' matched no agent; agent names seen: solver, (none)" in result.output
