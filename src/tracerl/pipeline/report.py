"""``tracerl report DATA --out report.html``: one static HTML page showing how training goes.

The page is a single file with its styles and charts inline (SVG drawn by
:mod:`tracerl.pipeline.charts`): it opens from disk or a mail attachment, with no server,
no script and no network. It reads the same tables a build does (:func:`analyze` over
DATA, local or ``s3://``; after a scheduled round, the round's own build's, not analyzed
again), so its numbers are the ones ``doctor`` and ``tracerl sql`` give:

- the reward of episodes per policy version, one line per split (an episode's reward is
  the sum of its outcome rewards; its policy version the newest one among its calls);
- LLM calls and tokens per agent;
- the doctor's funnel and notes;
- how often each AIR rule fired (every rule loaded, those that never fired at 0);
- per-round training metrics from a runs folder's ``metrics.jsonl`` (``--runs``);
- the worst episodes, with their calls.

:func:`report_data` gathers the figures (plain values, what the tests check);
:func:`render` turns them into the page.
"""

from __future__ import annotations

import html
import json
import math
import os
from pathlib import Path
from typing import Any

from tracerl.core.storage import write_atomic
from tracerl.pipeline import charts
from tracerl.schemas import attributes as A
from tracerl.schemas.run_metrics import upgraded
from tracerl.pipeline.build import Analysis, analyze
from tracerl.pipeline.doctor import explain
from tracerl.pipeline.options import BuildOptions
from tracerl.pipeline.rewards import SECONDARY_SOURCE
from tracerl.pipeline.source import PipelineInputError
from tracerl.pipeline.sql_text import sql_list

WORST_EPISODES = 10
TOP_AGENTS = 12

# an episode's reward: the sum of its outcome rewards (not AIR's shaping, not secondary dimensions)
_EPISODE_REWARD = f"""
    SELECT episode_id, sum(value) AS reward FROM rewards
    WHERE value IS NOT NULL AND episode_id IS NOT NULL AND source NOT IN ('air', '{SECONDARY_SOURCE}')
    GROUP BY 1"""


def _rows(analysis: Analysis, sql: str) -> list[dict[str, Any]]:
    cursor = analysis.con.execute(sql)
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row)) for row in cursor.fetchall()]


def reward_by_version(analysis: Analysis) -> list[dict[str, Any]]:
    """Mean episode reward and episode count per (policy, split, policy version), for rewarded episodes.

    With several policies (a LoRA adapter per agent group), an episode counts once for each
    policy that served some of its calls, at that policy's version: one curve per policy.
    """
    return _rows(analysis, f"""
        WITH reward AS ({_EPISODE_REWARD}),
             version AS (SELECT episode_id, coalesce(policy_name, '(none)') AS policy, max(policy_version) AS policy_version
                         FROM llm_calls GROUP BY 1, 2)
        SELECT v.policy, coalesce(e.split, '(none)') AS split, v.policy_version, avg(r.reward) AS mean_reward,
               count(*) AS episodes
        FROM episodes e JOIN reward r USING (episode_id) JOIN version v USING (episode_id)
        WHERE v.policy_version IS NOT NULL
        GROUP BY 1, 2, 3 ORDER BY 1, 2, 3""")


def agents(analysis: Analysis) -> list[dict[str, Any]]:
    """LLM calls and token counts per agent (the busiest first)."""
    return _rows(analysis, f"""
        SELECT coalesce(c.agent_name, '(none)') AS agent, count(*) AS calls,
               coalesce(sum(len(s.prompt_token_ids)), 0) AS prompt_tokens,
               coalesce(sum(len(s.completion_token_ids)), 0) AS completion_tokens
        FROM llm_calls c LEFT JOIN raw_spans s USING (file_index, file_row)
        GROUP BY 1 ORDER BY calls DESC, agent LIMIT {TOP_AGENTS}""")


def air_counts(analysis: Analysis) -> list[dict[str, Any]]:
    """Hits and total reward of every AIR rule loaded, in the rules' order (a rule that never fired: 0)."""
    fired = {r["name"]: r for r in _rows(analysis, """
        SELECT name, count(*) AS hits, sum(value) AS total FROM rewards WHERE source = 'air' GROUP BY 1""")}
    return [{"rule": rule.name, "hits": fired.get(rule.reward_name, {}).get("hits", 0),
             "total": fired.get(rule.reward_name, {}).get("total", 0.0)} for rule in analysis.rules]


def worst_episodes(analysis: Analysis) -> list[dict[str, Any]]:
    """The rewarded episodes with the lowest reward, each with its LLM calls in order."""
    episodes = _rows(analysis, f"""
        WITH reward AS ({_EPISODE_REWARD})
        SELECT e.episode_id, e.task_id, e.split, r.reward, e.truncated, (e.end_ns - e.start_ns) / 1e6 AS ms
        FROM episodes e JOIN reward r USING (episode_id)
        ORDER BY r.reward, e.episode_id LIMIT {WORST_EPISODES}""")
    if not episodes:
        return []
    calls = _rows(analysis, f"""
        SELECT episode_id, agent_name, policy_version, name, status_code, has_tokens,
               (end_ns - start_ns) / 1e6 AS ms
        FROM llm_calls WHERE list_contains({sql_list(e['episode_id'] for e in episodes)}, episode_id)
        ORDER BY episode_id, start_ns, span_id""")
    for episode in episodes:
        episode["calls"] = [c for c in calls if c["episode_id"] == episode["episode_id"]]
    return episodes


def read_metrics(runs: str | os.PathLike) -> list[dict[str, Any]]:
    """The rows of a runs folder's ``metrics.jsonl`` (or of that file given itself), one per training round, in
    today's field names (a run written before the drivers shared one row type reads as if written now)."""
    path = Path(runs)
    path = path / A.RUN_METRICS_FILE if path.is_dir() else path
    if not path.is_file():
        raise PipelineInputError(f"--runs {runs}: no {A.RUN_METRICS_FILE} there (give a runs folder holding one, or the file)")
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise PipelineInputError(f"{path}:{number} is not a JSON line ({exc})") from exc
        if not isinstance(row, dict):
            raise PipelineInputError(f"{path}:{number} is not a JSON object")
        rows.append(upgraded(row))
    return rows


def _metric_series(rows: list[dict[str, Any]]) -> tuple[list[float], dict[str, list[float | None]]]:
    """x (the round, else the row's place) and every numeric metric over it."""
    x = [row.get("round", i) for i, row in enumerate(rows)]
    names: list[str] = []
    for row in rows:
        names += [k for k, v in row.items() if k not in ("round", *names) and _number(v) is not None]
    return x, {name: [_number(row.get(name)) for row in rows] for name in names}


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def analysis_figures(analysis: Analysis) -> dict[str, Any]:
    """Every figure the page shows that comes from the spans, as plain values: from a report's own
    analysis, or from a build's (``build_dataset(on_analysis=...)``, what a scheduled round does)."""
    return {
        "data": str(analysis.files.location),
        "data_clock_unix_nano": analysis.con.execute("SELECT max(end_ns) FROM span_meta").fetchall()[0][0],
        "reward_by_version": reward_by_version(analysis),
        "agents": agents(analysis),
        "air": air_counts(analysis),
        "worst_episodes": worst_episodes(analysis),
        "doctor": explain(analysis),
        "judgments": analysis.counts["judgments"],
    }


def report_data(data: str | os.PathLike, *, runs: str | os.PathLike | None = None,
                options: BuildOptions | None = None, figures: dict[str, Any] | None = None) -> dict[str, Any]:
    """Every figure the page shows, as plain values; ``figures``: those of a build's analysis of ``data``
    (:func:`analysis_figures`), else ``data`` is analyzed here."""
    if figures is None:
        analysis = analyze(data, options or BuildOptions())
        try:
            figures = analysis_figures(analysis)
        finally:
            analysis.con.close()
    return {**figures, "metrics": read_metrics(runs) if runs is not None else None}


def _charts(figures: dict[str, Any]) -> dict[str, charts.Chart | str]:
    """Each section's chart, or the sentence that says why it has none."""
    made: dict[str, charts.Chart | str] = {}
    series: dict[str, list[tuple[float, float]]] = {}
    several = len({row["policy"] for row in figures["reward_by_version"]}) > 1
    for row in figures["reward_by_version"]:
        name = f"{row['policy']}: {row['split']}" if several else row["split"]
        series.setdefault(name, []).append((row["policy_version"], row["mean_reward"]))
    made["reward"] = (charts.lines("reward", series, xlabel="policy version", ylabel="mean episode reward")
                      if series else "no rewarded episode with a policy version yet")
    agent_rows = figures["agents"]
    made["agents"] = charts.bars(
        "agents", [a["agent"] for a in agent_rows],
        {"calls": [a["calls"] for a in agent_rows], "prompt tokens": [a["prompt_tokens"] for a in agent_rows],
         "completion tokens": [a["completion_tokens"] for a in agent_rows]},
        xlabel="count (symmetric log scale)", log=True,
    ) if agent_rows else "no LLM calls found"
    funnel = figures["doctor"]["funnel"]
    made["funnel"] = charts.bars("funnel", [stage for stage, _ in funnel], {"count": [n for _, n in funnel]},
                                 xlabel="count (symmetric log scale)", log=True)
    air = figures["air"]
    made["air"] = (charts.bars("air", [r["rule"] for r in air], {"hits": [r["hits"] for r in air]}, xlabel="hits")
                   if air else "no AIR rules loaded (--no-default-rules and no --rules)")
    metrics = figures["metrics"]
    if metrics is None:
        made["metrics"] = "no runs folder given (tracerl report DATA --runs RUNS shows RUNS/metrics.jsonl)"
    else:
        x, values = _metric_series([row for row in metrics if not row.get(A.RUN_METRICS_SET_ASIDE)])
        made["metrics"] = (charts.small_multiples("metrics", x, values, xlabel="round")
                           if values else "metrics.jsonl holds no numeric metric yet")
    return made


_CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2rem auto; max-width: 72rem; padding: 0 1rem; color: #222; }
h1 { font-size: 1.5rem; margin-bottom: 0.2rem; } h2 { font-size: 1.15rem; margin-top: 2rem; border-bottom: 1px solid #ddd; }
.meta { color: #666; } figure { margin: 0.5rem 0; } figure svg { max-width: 100%; height: auto; }
.empty { color: #888; font-style: italic; }
table { border-collapse: collapse; font-size: 13px; } td, th { padding: 2px 10px; text-align: left; border-bottom: 1px solid #eee; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
details { margin: 2px 0; } summary { cursor: pointer; } ul.notes { color: #444; }
"""


def _e(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return html.escape("" if value is None else str(value))


def _section(title: str, chart: charts.Chart | str, extra: str = "") -> str:
    if isinstance(chart, str):
        body = f'<p class="empty">{_e(chart)}</p>'
    else:
        body = f'<figure data-chart="{chart.name}" data-marks="{chart.marks}">{chart.svg}</figure>'
    return f"<section><h2>{_e(title)}</h2>{body}{extra}</section>"


def _table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    def cell(tag: str, value: Any) -> str:
        numeric = isinstance(value, int | float) and not isinstance(value, bool)
        return f'<{tag}{" class=num" if numeric else ""}>{_e(value)}</{tag}>'

    head = "".join(f"<th>{_e(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(cell("td", row.get(c)) for c in columns) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _worst(episodes: list[dict[str, Any]]) -> str:
    if not episodes:
        return '<p class="empty">no rewarded episode yet</p>'
    items = []
    for e in episodes:
        summary = (f"<b>{_e(e['reward'])}</b> {_e(e['episode_id'])} · task {_e(e['task_id'])} · {_e(e['split'])} · "
                   f"{len(e['calls'])} call(s) · {_e(e['ms'])} ms{' · truncated' if e['truncated'] else ''}")
        calls = _table(e["calls"], ["agent_name", "policy_version", "name", "status_code", "has_tokens", "ms"])
        items.append(f"<details><summary>{summary}</summary>{calls}</details>")
    return "".join(items)


def _set_aside(metrics: list[dict[str, Any]]) -> str:
    """The rounds a schedule set aside (nothing trainable in them), which made no version and so no chart point."""
    rows = [row for row in metrics if row.get(A.RUN_METRICS_SET_ASIDE)]
    if not rows:
        return ""
    return f"<p>{len(rows)} round(s) set aside, no version made:</p>" + _table(rows, ["round", "episodes", "reason", "at"])


def _judgments(judgments: dict[str, Any]) -> str:
    """``tracerl pipeline judge``'s outcomes: episodes judged, failed (judged again next run) and skipped, by reason."""
    if not judgments["files"]:
        return '<p class="empty">no judgments (tracerl pipeline judge writes them to the data dir)</p>'
    rows = [{"outcome": status, "episodes": n} for status, n in judgments["by_status"].items() if status != "skipped"]
    rows += [{"outcome": f"skipped: {reason}", "episodes": n} for reason, n in judgments["skipped"].items()]
    rows += [{"outcome": f"failed: {reason}", "episodes": n} for reason, n in judgments["failed_reasons"].items()]
    return _table(rows, ["outcome", "episodes"])


def render(figures: dict[str, Any]) -> str:
    """The page for :func:`report_data`'s figures."""
    made = _charts(figures)
    doctor = figures["doctor"]
    notes = "".join(f"<li>{_e(n)}</li>" for n in doctor["notes"])
    sections = [
        _section("Reward per policy version, by split (and policy, where several are trained)", made["reward"],
                 _table(figures["reward_by_version"], ["policy", "split", "policy_version", "mean_reward", "episodes"])),
        _section("Training metrics per round", made["metrics"], _set_aside(figures["metrics"] or [])),
        _section("LLM calls and tokens per agent", made["agents"],
                 _table(figures["agents"], ["agent", "calls", "prompt_tokens", "completion_tokens"])),
        _section("Doctor: from spans to transitions", made["funnel"], f'<ul class="notes">{notes}</ul>'),
        _section("Automatic intermediate rewards (AIR): hits per rule", made["air"]),
        f"<section><h2>Judge: episodes scored by tracerl pipeline judge</h2>{_judgments(figures['judgments'])}</section>",
        f"<section><h2>Worst {WORST_EPISODES} episodes, with their calls</h2>{_worst(figures['worst_episodes'])}</section>",
    ]
    clock = figures["data_clock_unix_nano"]
    meta = f"data: {_e(figures['data'])}" + (f" · latest span ended at {_e(_utc(clock))} UTC" if clock else "")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>tracerl report</title><style>{_CSS}</style></head><body>"
        f'<h1>tracerl report</h1><p class="meta">{meta}</p>{"".join(sections)}</body></html>\n'
    )


def _utc(unix_nano: int) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(unix_nano / 1e9, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def write_report(data: str | os.PathLike, out: str | os.PathLike, *, runs: str | os.PathLike | None = None,
                 options: BuildOptions | None = None, figures: dict[str, Any] | None = None) -> Path:
    """Write the page for ``data`` to ``out`` whole or not at all (a scheduler may refresh it while someone reads it);
    ``figures``: a build's, taken from its analysis of ``data`` (:func:`report_data`)."""
    page = render(report_data(data, runs=runs, options=options, figures=figures))
    target = Path(out)
    target.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(target, page)
    return target
