"""`tracerl report`: the figures it shows, worked out by hand, and the page as headless Chromium draws it."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from tracerl.cli import app
from tracerl.pipeline.report import report_data
from tracerl.schemas import attributes as A
from tracerl_testing.browser import chromium_path, open_page
from tracerl_testing.span_builders import episode_span, llm_call, reward_span, tool_span, write_spans
from tracerl_testing.installed import require

# (episode, policy version, split, reward): every episode has a planner call, a failing tool, a coder call
EPISODES = [("e0", 1, "train", 0.0), ("e1", 1, "train", 1.0), ("e2", 2, "train", 1.0), ("e3", 2, "test", 0.5),
            ("e4", 1, "test", 0.0)]


def _write_data(data_dir):
    rows = []
    for ep, version, split, reward in EPISODES:
        rows += [
            episode_span(ep, 0, 100, task="t", attrs={A.SPLIT: split}),
            llm_call(ep, "c1", 1, 10, [1, 2], [3], agent="planner", version=version),
            tool_span(ep, "tool", 11, 12, status="ERROR"),  # AIR's tool_error penalises c1
            llm_call(ep, "c2", 13, 20, [1, 2, 3], [4, 5], agent="coder", version=version),
            reward_span(ep, "r", 30, reward),
        ]
    return write_spans(data_dir, rows)


def _write_runs(folder):
    folder.mkdir()
    rows = [{"round": i, "policy_version": i, "train_loss": 1.0 / (i + 1), "skipped": 0, "note": "text is not plotted"}
            for i in range(4)]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return folder


def test_each_policy_has_its_reward_curve_at_its_own_versions(data_dir, tmp_path):
    # a policy per agent: the writer's adapter moved on to version 2, the checker's stayed at 0
    rows = []
    for ep, writer_version, reward in (("e1", 1, 1.0), ("e2", 2, 0.0), ("e3", 2, 1.0)):
        rows += [
            episode_span(ep, 0, 100, task="t"),
            llm_call(ep, "w", 1, 10, [1], [2], agent="writer", model="writer", version=writer_version),
            llm_call(ep, "c", 11, 20, [3], [4], agent="checker", model="checker", version=0),
            reward_span(ep, "r", 30, reward),
        ]
    figures = report_data(write_spans(data_dir, rows))
    assert [(r["policy"], r["policy_version"], r["mean_reward"], r["episodes"]) for r in figures["reward_by_version"]] == [
        ("checker", 0, pytest.approx(2 / 3), 3), ("writer", 1, 1.0, 1), ("writer", 2, 0.5, 2)]


def test_the_figures_are_the_data_worked_out_by_hand(data_dir, tmp_path):
    figures = report_data(_write_data(data_dir), runs=_write_runs(tmp_path / "runs"))
    assert [(r["split"], r["policy_version"], r["mean_reward"], r["episodes"]) for r in figures["reward_by_version"]] == [
        ("test", 1, 0.0, 1), ("test", 2, 0.5, 1), ("train", 1, 0.5, 2), ("train", 2, 1.0, 1)]
    assert {r["policy"] for r in figures["reward_by_version"]} == {"(none)"}  # no server named the model
    assert figures["agents"] == [
        {"agent": "coder", "calls": 5, "prompt_tokens": 15, "completion_tokens": 10},
        {"agent": "planner", "calls": 5, "prompt_tokens": 10, "completion_tokens": 5},
    ]
    air = {r["rule"]: (r["hits"], r["total"]) for r in figures["air"]}
    assert air.pop("tool_error") == (5, pytest.approx(-0.5)) and set(air.values()) == {(0, 0.0)}
    worst = figures["worst_episodes"]
    assert [(e["episode_id"], e["reward"]) for e in worst] == [("e0", 0.0), ("e4", 0.0), ("e3", 0.5), ("e1", 1.0), ("e2", 1.0)]
    assert [c["agent_name"] for c in worst[0]["calls"]] == ["planner", "coder"]  # in the order they ran
    assert dict(figures["doctor"]["funnel"])["transitions"] == 10
    # written with the local loop's old name (train_loss): read in today's (schemas/run_metrics.py)
    assert [row["loss"] for row in figures["metrics"]] == [1.0, 0.5, pytest.approx(1 / 3), 0.25]


def test_a_runs_file_that_is_not_json_lines_is_named_with_its_line(data_dir, tmp_path):
    runs = _write_runs(tmp_path / "runs")
    with (runs / "metrics.jsonl").open("a") as handle:
        handle.write("{not json\n")
    result = CliRunner().invoke(app, ["report", str(_write_data(data_dir)), "--out", str(tmp_path / "r.html"),
                                      "--runs", str(runs)])
    assert result.exit_code == 2
    assert f"{runs / 'metrics.jsonl'}:5 is not a JSON line" in result.output
    assert not (tmp_path / "r.html").exists()


# Per figure: marks drawn with a visible size. A mark group holds a line's markers (<use>) or one bar (<path>).
_COUNT_MARKS = """
Object.fromEntries([...document.querySelectorAll('figure[data-chart]')].map(figure => {
  const visible = el => { const r = el.getBoundingClientRect(); return r.width > 0 && r.height > 0; };
  let drawn = 0;
  for (const group of figure.querySelectorAll('g[id^="mark-"]')) {
    const markers = group.querySelectorAll('use');
    drawn += markers.length ? [...markers].filter(visible).length : [...group.querySelectorAll('path')].filter(visible).length;
  }
  return [figure.dataset.chart, {drawn, expected: Number(figure.dataset.marks)}];
}))
"""


def test_the_page_draws_every_chart_in_headless_chromium(data_dir, tmp_path):
    require(chromium_path() is not None, "chromium", "apt-get install chromium (Debian's package)")
    page_file = tmp_path / "report.html"
    result = CliRunner().invoke(app, ["report", str(_write_data(data_dir)), "--out", str(page_file),
                                      "--runs", str(_write_runs(tmp_path / "runs"))])
    assert result.exit_code == 0, result.output
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page_file.read_text())  # nothing to fetch

    with open_page(page_file) as page:
        marks = page.evaluate(_COUNT_MARKS)
        episodes = page.evaluate("document.querySelectorAll('details').length")
        page.screenshot(tmp_path / "report.png")  # kept in the test's tmp_path for a person to look at
        errors, requests = page.errors(), page.requests

    assert errors == []
    assert requests == [page_file.resolve().as_uri()]  # the page asked for nothing but itself
    assert set(marks) == {"reward", "metrics", "agents", "funnel", "air"}
    for chart, seen in marks.items():
        assert seen["drawn"] == seen["expected"] > 0, chart
    # reward: 4 (split, version) points; metrics: 4 rounds x 3 numeric metrics; agents: 2 x 3 bars;
    # funnel: its non-zero stages; air: the one rule that fired
    assert {c: marks[c]["expected"] for c in ("reward", "metrics", "agents", "air")} == {
        "reward": 4, "metrics": 12, "agents": 6, "air": 1}
    assert episodes == 5
    assert (tmp_path / "report.png").stat().st_size > 10_000


def test_a_build_hands_the_report_the_figures_it_would_work_out_itself(data_dir, tmp_path):
    """What a scheduled round does: the figures taken from its build's analysis are the report's own."""
    from tracerl.pipeline import build_dataset
    from tracerl.pipeline.report import analysis_figures

    data = _write_data(data_dir)
    taken = {}
    build_dataset(data, tmp_path / "dataset", on_analysis=lambda analysis: taken.update(analysis_figures(analysis)))
    assert report_data(data, figures=taken) == report_data(data)
