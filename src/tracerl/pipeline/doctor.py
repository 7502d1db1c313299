"""``pipeline doctor``: why spans did or did not become transitions, with counts.

The most common complaint about trace-to-RL tools is a silently empty dataset. The
doctor runs every stage of a build except the write and reports the funnel (files ->
spans -> episodes -> LLM calls -> policy calls -> rewarded -> transitions), then each
reason data fell out, with what to do about it.
"""

from __future__ import annotations

import os
from typing import Any

from tracerl.pipeline.build import Analysis, analyze
from tracerl.pipeline.counts import warnings
from tracerl.pipeline.layouts import tokens_sql
from tracerl.pipeline.options import BuildOptions
from tracerl.pipeline.sql_text import sql_str
from tracerl.schemas import attributes as A


def _calls_without_prompt_ids(analysis: Analysis) -> int:
    """Chosen calls whose span has completion ids but no prompt ids (a build finds them while writing)."""
    return analysis.con.execute(
        f"""SELECT count(*) FROM chosen c JOIN raw_spans r USING (file_index, file_row)
            WHERE {tokens_sql('prompt', 'r.prompt_token_ids', 'r.attributes')} IS NULL"""
    ).fetchall()[0][0]


def _calls_to_retokenize(analysis: Analysis) -> dict[str, int]:
    """Chosen calls without the server's token ids (``--retokenize`` rebuilds theirs from their messages), by API."""
    rows = analysis.con.execute(
        f"""SELECT coalesce(attr(r.attributes, {sql_str(A.LLM_API)}), 'chat completions or other') AS api, count(*)
            FROM chosen c JOIN raw_spans r USING (file_index, file_row) WHERE NOT c.has_tokens GROUP BY 1 ORDER BY 1"""
    ).fetchall()
    return dict(rows)


def diagnose(spans: str | os.PathLike, options: BuildOptions) -> dict[str, Any]:
    """The funnel and the notes, as a dict (``funnel``: list of (stage, count); ``notes``: list of str)."""
    analysis = analyze(spans, options)
    try:
        return explain(analysis)
    finally:
        analysis.con.close()


def explain(analysis: Analysis) -> dict[str, Any]:
    """:func:`diagnose`'s answer for an analysis already run (the report shows it beside its charts)."""
    options = analysis.options
    c = analysis.counts
    no_prompt = _calls_without_prompt_ids(analysis)
    if no_prompt:
        c["llm_calls"]["skipped"]["no_token_ids"] = c["llm_calls"]["skipped"].get("no_token_ids", 0) + no_prompt
        c["transitions"] -= no_prompt
    funnel = [
        ("span files read", c["files"]["read"]),
        ("span files skipped", c["files"]["rejected"]),
        ("spans", c["spans"]["distinct"]),
        ("episodes", c["episodes"]["total"]),
        ("  finished", c["episodes"]["finished"]),
        ("  still running (held back)", c["episodes"]["pending"]),
        ("LLM calls", c["llm_calls"]["total"]),
        ("policy calls (after filters)", c["llm_calls"]["policy_calls"]),
        ("episodes with policy calls", c["episodes"]["with_policy_calls"]),
        ("  of which rewarded", c["episodes"]["with_policy_calls"] - c["episodes"]["without_reward"]),
        ("transitions", c["transitions"]),
    ]
    judged = c["judgments"]
    if judged["files"]:
        funnel += [(f"judged episodes: {status}", n) for status, n in judged["by_status"].items()]
    notes = warnings(analysis.inputs(), c, options)
    if options.retokenize and (rebuilt := _calls_to_retokenize(analysis)):
        notes.append(f"{sum(rebuilt.values())} transition(s) will have token ids rebuilt from their messages (--retokenize), "
                     "captured without the server's: " + ", ".join(f"{n} x {api}" for api, n in rebuilt.items()))
    agents = c["llm_calls"]["by_agent"]
    if c["llm_calls"]["skipped"].get("agent_filter") and not c["llm_calls"]["policy_calls"]:
        notes.insert(0, f"--agents {options.agents!r} matched no agent; agent names seen: {', '.join(agents)}")
    if not notes and c["transitions"]:
        notes.append("every span that could become a transition did")
    return {"funnel": funnel, "notes": notes, "counts": c}
