"""Counts of what each stage kept and dropped, and the plain-language warnings made from them.

The build records them in its manifest (and the CLI prints the warnings); ``pipeline
doctor`` shows them as a funnel. Both read the same numbers from here.
"""

from __future__ import annotations

from typing import Any

import duckdb

from tracerl.pipeline.log_content import CONTENT_EVENTS
from tracerl.pipeline.options import GROUP_ADVANTAGES, BuildOptions
from tracerl.pipeline.source import SpanFiles
from tracerl.pipeline.sql_text import sql_str
from tracerl.schemas import attributes as A


def _grouped(con: duckdb.DuckDBPyConnection, sql: str) -> dict[str, int]:
    return {str(k): int(v) for k, v in con.execute(sql).fetchall()}


def stage_counts(
    con: duckdb.DuckDBPyConnection, files: SpanFiles, previously: int, policies: dict[str, tuple[str, ...]] | None = None,
) -> dict[str, Any]:
    """What each stage kept and dropped, read from the tables after the last stage (``chosen``).

    ``previously``: episodes an earlier incremental build already turned into transitions;
    ``policies``: the build's {policy: agents}, whose agents no call has are listed.
    """
    one = lambda sql: con.execute(sql).fetchall()[0][0]  # noqa: E731
    skipped_calls = _grouped(con, "SELECT excluded, count(*) FROM call_status WHERE excluded IS NOT NULL GROUP BY 1")
    no_reward_calls = one("SELECT count(*) FROM policy_calls WHERE episode_id NOT IN (SELECT episode_id FROM rewarded_episodes)")
    no_tokens = one(
        "SELECT count(*) FROM policy_calls WHERE NOT has_tokens AND coalesce(status_code, '') <> 'ERROR' "
        "AND episode_id IN (SELECT episode_id FROM rewarded_episodes) "
        "AND (trace_id, span_id) NOT IN (SELECT (trace_id, span_id) FROM chosen)"  # --retokenize chooses some
    )
    # a call that failed (error.type and the server's message on its span) is no call "without token ids"
    failed_messages = _grouped(
        con,
        "SELECT coalesce(m.status_message, '(no message)'), count(*) FROM policy_calls p JOIN span_meta m USING (trace_id, span_id) "
        "WHERE NOT p.has_tokens AND p.status_code = 'ERROR' GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 5",
    )
    failed = one(
        "SELECT count(*) FROM policy_calls WHERE NOT has_tokens AND status_code = 'ERROR' "
        "AND episode_id IN (SELECT episode_id FROM rewarded_episodes)"
    )
    if no_reward_calls:
        skipped_calls["episode_no_reward"] = no_reward_calls
    if no_tokens:
        skipped_calls["no_token_ids"] = no_tokens
    if failed:
        skipped_calls["failed"] = failed
    return {
        "files": {"read": len(files.files), "rejected": len(files.rejected), "reward_files": len(files.reward_files),
                  "log_files": len(files.log_files)},
        # OTLP log records carrying GenAI message content (pipeline/log_content.py)
        "logs": {
            "content_records": one(f"SELECT count(*) FROM log_records WHERE event_name IN {CONTENT_EVENTS}"),
            # GenAI events of a name no stage reads (a newer conventions version): by name
            "unknown_events": _grouped(
                con, f"SELECT event_name, count(*) FROM log_records WHERE event_name NOT IN {CONTENT_EVENTS} GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 10"
            ),
            "spans_with_content": one("SELECT count(*) FROM log_content"),
            "without_span": one(f"SELECT count(*) FROM log_records WHERE (span_id IS NULL OR trace_id IS NULL) AND event_name IN {CONTENT_EVENTS}"),
            "span_missing": one("SELECT count(*) FROM log_content WHERE (trace_id, span_id) NOT IN (SELECT (trace_id, span_id) FROM span_meta)"),
        },
        "spans": {
            "rows": one("SELECT count(*) FROM raw_spans"),
            "distinct": one("SELECT count(*) FROM span_meta"),
            "content_layouts": _grouped(con, "SELECT content_layout, count(*) FROM llm_calls GROUP BY 1 ORDER BY 1"),
            # calls whose message JSON does not read: kept as text, still trained on from their token ids
            "content_problems": _grouped(
                con, "SELECT content_problem, count(*) FROM llm_calls WHERE content_problem IS NOT NULL GROUP BY 1 ORDER BY 1"
            ),
            # HTTP client spans of LLM requests: a captured call's transport, or a request no hook recognised
            "http_llm_requests": _grouped(
                con,
                f"SELECT attr(attributes, {sql_str(A.HTTP_LLM_REQUEST)}), count(*) FROM raw_spans "
                f"WHERE attributes LIKE {sql_str('%' + A.HTTP_LLM_REQUEST + '%')} GROUP BY 1 ORDER BY 1",
            ),
            "unrecognised_llm_requests": _grouped(
                con,
                f"SELECT coalesce(attr(attributes, {sql_str(A.URL_FULL)}), attr(attributes, {sql_str(A.HTTP_URL_OLD)})), "
                f"count(*) FROM raw_spans WHERE attributes LIKE {sql_str('%' + A.HTTP_LLM_REQUEST + '%')} "
                f"AND attr(attributes, {sql_str(A.HTTP_LLM_REQUEST)}) = {sql_str(A.HTTP_LLM_REQUEST_UNRECOGNISED)} "
                "GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 5",
            ),
        },
        "episodes": {
            "total": one("SELECT count(*) FROM episodes"),
            "finished": one("SELECT count(*) FROM episodes WHERE finished"),
            "pending": one("SELECT count(*) FROM episodes WHERE pending"),
            "truncated": one("SELECT count(*) FROM episodes WHERE truncated AND episode_id IN (SELECT episode_id FROM chosen)"),
            "without_llm_calls": one("SELECT count(*) FROM episodes WHERE episode_id NOT IN (SELECT episode_id FROM llm_calls)"),
            "with_policy_calls": one("SELECT count(DISTINCT episode_id) FROM policy_calls"),
            "without_reward": one(
                "SELECT count(DISTINCT episode_id) FROM policy_calls WHERE episode_id NOT IN (SELECT episode_id FROM rewarded_episodes)"
            ),
            # agentlightning's rollouts (ids or spans of its own) whose reward never reached the wire
            "agentlightning_without_reward": one(
                f"""SELECT count(DISTINCT p.episode_id) FROM policy_calls p JOIN episodes e USING (episode_id)
                    WHERE p.episode_id NOT IN (SELECT episode_id FROM rewarded_episodes)
                      AND (e.rollout_id IS NOT NULL OR p.episode_id IN (
                          SELECT episode_id FROM span_meta WHERE starts_with(name, {sql_str(A.AGENTLIGHTNING_SPAN_NAME_PREFIX)})))"""
            ),
            "already_processed": previously,
            "emitted": one("SELECT count(DISTINCT episode_id) FROM chosen"),
        },
        "llm_calls": {
            "total": one("SELECT count(*) FROM llm_calls"),
            "merged_duplicates": one("SELECT coalesce(sum(copies - 1), 0) FROM llm_calls"),
            "policy_calls": one("SELECT count(*) FROM policy_calls"),
            "by_agent": _grouped(
                con, "SELECT coalesce(agent_name, '(none)'), count(*) FROM llm_calls GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 20"
            ),
            "by_policy": _grouped(
                con, "SELECT coalesce(policy_name, '(none)'), count(*) FROM llm_calls GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 20"
            ),
            "skipped": dict(sorted(skipped_calls.items())),
            "failed_messages": failed_messages,
            # calls a --policy agent made that another model served: "agent -> served (expected)": calls
            "wrong_policy": _grouped(
                con,
                "SELECT agent_name || ' -> ' || coalesce(policy_name, '(none)'), count(*) FROM call_status "
                "WHERE excluded = 'wrong_policy' GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 10",
            ),
            "policy_agents_unseen": _unseen_agents(con, policies or {}),
        },
        "rewards": {
            "by_source": _grouped(con, "SELECT source, count(*) FROM rewards GROUP BY 1 ORDER BY 1"),
            "by_name": _grouped(con, "SELECT name, count(*) FROM rewards GROUP BY 1 ORDER BY 1"),
            "without_value": one("SELECT count(*) FROM rewards WHERE value IS NULL"),
            "unmatched_episode": one("SELECT count(*) FROM rewards WHERE episode_id IS NULL"),
            "episode_without_policy_calls": one(
                "SELECT count(*) FROM rewards WHERE value IS NOT NULL AND episode_id IS NOT NULL "
                "AND episode_id NOT IN (SELECT episode_id FROM policy_calls)"
            ),
            "ignored_by_weights": one("SELECT count(*) FROM attached_rewards WHERE weight = 0"),
        },
        "transitions": one("SELECT count(*) FROM chosen"),
        "task_groups": _task_groups(con),
        # `pipeline judge`'s outcomes (judgments/), each episode's latest under each judge model and rubric
        "judgments": {
            "files": len(files.judgment_files),
            "by_status": _grouped(con, "SELECT status, count(*) FROM judgments GROUP BY 1 ORDER BY 1"),
            "skipped": _grouped(con, "SELECT reason, count(*) FROM judgments WHERE status = 'skipped' GROUP BY 1 ORDER BY 1"),
            "failed_reasons": _grouped(
                con, "SELECT left(reason, 120), count(*) FROM judgments WHERE status = 'failed' GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 3"
            ),
        },
    }


def _unseen_agents(con: duckdb.DuckDBPyConnection, policies: dict[str, tuple[str, ...]]) -> dict[str, list[str]]:
    """Each policy's agents that made no call (a misspelt name, or an agent that has not run yet)."""
    if not policies:
        return {}
    seen = {row[0] for row in con.execute("SELECT DISTINCT agent_name FROM llm_calls WHERE agent_name IS NOT NULL").fetchall()}
    return {name: missing for name, agents in policies.items() if (missing := [a for a in agents if a not in seen])}


def _task_groups(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """The task groups of the chosen episodes (episodes without a task id are one group), and
    those of one episode, which a group advantage (GRPO, RLOO) can only give 0."""
    total, single, single_transitions = con.execute(
        """SELECT count(*), count(*) FILTER (WHERE episodes = 1), coalesce(sum(transitions) FILTER (WHERE episodes = 1), 0)
           FROM (SELECT count(DISTINCT episode_id) AS episodes, count(*) AS transitions
                 FROM chosen GROUP BY coalesce(task_id, ''))"""
    ).fetchall()[0]
    return {"total": int(total), "single_episode": int(single), "single_episode_transitions": int(single_transitions)}


def warnings(inputs: dict[str, Any], c: dict[str, Any], options: BuildOptions) -> list[str]:
    """Plain-language reasons why data did not become transitions, or became useless ones
    (shown by the CLI and doctor)."""
    notes = []
    advantage = options.advantage
    if not inputs["span_files"]:
        notes.append(f"no readable span files under {inputs['spans']}")
    for rejected in inputs["rejected_files"]:
        notes.append(f"skipped file {rejected['file']}: {rejected['reason']}")
    if inputs["span_files"] and not c["llm_calls"]["total"]:
        notes.append("no LLM calls found: spans need token ids or gen_ai/OpenLLMetry/OpenInference LLM attributes")
    labels = {
        "no_token_ids": f"LLM call(s) without prompt/completion token ids (serve with token ids returned, e.g. vLLM "
                        f"{A.VLLM_RETURN_TOKEN_IDS_FIELD}; calls another instrumentation traced: --retokenize MODEL_FOLDER "
                        "rebuilds them from their messages)",
        "failed": f"LLM call(s) failed (their spans' {A.ERROR_TYPE} and status message say why)",
        "agent_filter": f"LLM call(s) excluded by {'--policy (agents no policy names)' if options.policies else '--agents'}",
        "wrong_policy": "LLM call(s) served by another model than their agent's --policy (not trained on: give each agent its policy's model name)",
        "policy_version_filter": "LLM call(s) excluded by --policy-versions",
        "split_filter": "LLM call(s) excluded by --split",
        "episode_pending": "LLM call(s) in episodes that have not finished yet (held back until they end or time out)",
        "episode_no_reward": f"LLM call(s) in episodes with no reward (emit {A.REWARD_SPAN_NAME} or pass --rewards)",
        "already_processed": "LLM call(s) in episodes an earlier incremental run already processed",
        "judge_call": f"LLM call(s) of the judge (agent {A.JUDGE_AGENT}), never policy calls",
    }
    for reason, n in c["llm_calls"]["skipped"].items():
        notes.append(f"{n} {labels.get(reason, reason)}")
    if c["llm_calls"].get("retokenized"):
        notes.append(f"{c['llm_calls']['retokenized']} transition(s) have token ids rebuilt from their messages with "
                     f"--retokenize {options.retokenize} (token_source = '{A.TOKEN_SOURCE_RETOKENIZED}'): they may differ from "
                     "the tokens the policy sampled")
    if c["llm_calls"].get("wrong_policy"):
        notes.append("calls routed to the wrong policy, as agent -> the model that served them: "
                     + "; ".join(f"{n} x {route}" for route, n in c["llm_calls"]["wrong_policy"].items())
                     + " (" + "; ".join(f"{name} serves {', '.join(agents)}" for name, agents in options.policies.items()) + ")")
    seen = ", ".join(a for a in c["llm_calls"]["by_agent"] if a != "(none)") or "none"
    for name, missing in (c["llm_calls"].get("policy_agents_unseen") or {}).items():
        notes.append(f"--policy {name} names agent(s) no call has: {', '.join(missing)} (agent names seen: {seen})")
    logs = c.get("logs") or {}
    if logs.get("unknown_events"):
        notes.append("GenAI log records of events this tracerl does not read (a newer version of the semantic conventions?), "
                     "their content not used: " + ", ".join(f"{n} x {name}" for name, n in logs["unknown_events"].items()))
    if logs.get("without_span"):
        notes.append(f"{logs['without_span']} log record(s) with message content name no span (emitted outside a span?): their content is not used")
    if logs.get("span_missing"):
        notes.append(f"{logs['span_missing']} span(s) have message log records but are not in the spans read "
                     "(span files missing, rejected or not yet written): their content waits for them")
    problems = c["spans"].get("content_problems") or {}
    if problems.get("truncated"):
        notes.append(f"{problems['truncated']} LLM call(s) whose messages capture cut at its size limit "
                     f"(TRACERL_MAX_CONTENT_CHARS): their message JSON is kept as the cut text (not JSON); "
                     "they still train from their token ids; raise the limit to keep whole conversations")
    if problems.get("invalid_json"):
        notes.append(f"{problems['invalid_json']} LLM call(s) whose message attributes are not valid JSON (cut by a "
                     "length limit such as OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT, or malformed): kept as text; "
                     "they still train from their token ids")
    unrecognised = c["spans"].get("unrecognised_llm_requests")
    if unrecognised:
        notes.append(
            f"{sum(unrecognised.values())} LLM request(s) seen only as HTTP client spans, no hook recognised them "
            f"({'; '.join(f'{n} x POST {url}' for url, n in unrecognised.items())}): send them with the OpenAI Python "
            "SDK, LiteLLM or httpx (a JSON body, not a stream), which tracerl captures, or point the client at `tracerl gateway`"
        )
    failed = c["llm_calls"].get("failed_messages")
    if failed:
        notes.append("failed LLM calls, by the server's message: " + "; ".join(f"{n} x {m}" for m, n in failed.items()))
    r = c["rewards"]
    if c["episodes"]["agentlightning_without_reward"]:
        notes.append(
            f"{c['episodes']['agentlightning_without_reward']} agentlightning rollout(s) without a reward in the spans: "
            "a reward the agent returns as its value stays in agentlightning's store; export those rewards as a file "
            "with rollout_id (and attempt_id) and value columns and pass it with --rewards "
            "(docs/migrating-from-agentlightning.md)"
        )
    if r["unmatched_episode"]:
        notes.append(f"{r['unmatched_episode']} reward(s) name an episode, trace, response or rollout not found in the spans")
    if r["without_value"]:
        notes.append(f"{r['without_value']} reward(s) without a numeric {A.REWARD_VALUE}")
    if r["ignored_by_weights"]:
        notes.append(f"{r['ignored_by_weights']} reward(s) ignored: their name has no --reward-weight")
    if c["episodes"]["truncated"]:
        notes.append(f"{c['episodes']['truncated']} episode(s) never finished and were processed after the timeout (truncated)")
    judged = c["judgments"]
    if judged["by_status"].get("failed"):
        notes.append(f"{judged['by_status']['failed']} episode(s) the judge could not score (run `tracerl pipeline judge` again; "
                     "by error: " + "; ".join(f"{n} x {m}" for m, n in judged["failed_reasons"].items()) + ")")
    for reason, n in judged["skipped"].items():
        notes.append(f"{n} episode(s) not sent to the judge: {reason}")
    groups = c["task_groups"]
    if advantage in GROUP_ADVANTAGES and groups["single_episode"]:
        which = "all" if groups["single_episode"] == groups["total"] else f"{groups['single_episode']} of"
        notes.append(
            f"{which} {groups['total']} task group(s) hold a single episode, so --advantage {advantage} gives their "
            f"{groups['single_episode_transitions']} transition(s) an advantage of 0 (nothing to compare with): "
            "sample several episodes per task (the same task_id), or build with --advantage batch "
            "(baseline: the mean return of all episodes of the build) or --advantage none (the return itself)"
        )
    return notes
