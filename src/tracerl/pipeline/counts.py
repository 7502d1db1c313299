"""The counts of a build, merged from what each stage reports, and the plain-language warnings made from them.

Each stage module counts what it kept and dropped from its own relations (``counts(con)``
beside the code that makes them; :data:`tracerl.pipeline.build.STAGES` calls it) and
returns a part of the nested dict the manifest records; :func:`merge` puts the parts
together. The CLI prints the warnings; ``pipeline doctor`` shows the counts as a funnel.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import duckdb

from tracerl.pipeline.options import GROUP_ADVANTAGES, BuildOptions
from tracerl.schemas import attributes as A

# Why an evaluation event is not a reward (pipeline.rewards decides, first match wins; the
# warnings here name the problems). The first three are choices (the
# judge's own events, whose scores its rewards file already holds; the source switched off; a
# name not selected); the rest are the event's problems, which the build's warnings name.
EVALUATION_CHOICES = ("tracerl_judge", "off", "not_selected")
EVALUATION_PROBLEMS = {
    "no_name": f"no {A.GEN_AI_EVALUATION_NAME} (the conventions require it)",
    "error": f"the evaluation failed ({A.ERROR_TYPE} set)",
    "label_only": f"a {A.GEN_AI_EVALUATION_SCORE_LABEL} but no {A.GEN_AI_EVALUATION_SCORE_VALUE}: a label is no number to train on",
    "no_score": f"neither {A.GEN_AI_EVALUATION_SCORE_VALUE} nor a label",
    "not_a_number": f"a {A.GEN_AI_EVALUATION_SCORE_VALUE} that is not a finite number",
}


def scalar(con: duckdb.DuckDBPyConnection, sql: str) -> Any:
    """The one value ``sql`` returns."""
    return con.execute(sql).fetchall()[0][0]


def grouped(con: duckdb.DuckDBPyConnection, sql: str) -> dict[str, int]:
    """``{key: count}`` of a two-column ``sql``."""
    return {str(k): int(v) for k, v in con.execute(sql).fetchall()}


# the manifest's sections, in the order the funnel reads them
SECTIONS = ("files", "logs", "spans", "episodes", "llm_calls", "rewards", "transitions", "task_groups", "judgments")


def merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """One nested dict of the parts (sections merged key by key; the ``skipped`` counts of a reason summed, reasons sorted)."""
    merged: dict[str, Any] = {}
    for part in parts:
        for section, value in part.items():
            if isinstance(value, dict):
                target = merged.setdefault(section, {})
                for key, item in value.items():
                    if key == "skipped":
                        target[key] = dict(sorted((Counter(target.get(key, {})) + Counter(item)).items()))
                    else:
                        target[key] = item
            else:
                merged[section] = value
    return {section: merged[section] for section in SECTIONS if section in merged} | {
        k: v for k, v in merged.items() if k not in SECTIONS
    }


def summed(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """The counts of builds of disjoint parts of one input (the buckets of a distributed build), added key by key.

    Every count of a build counts rows of its own part, so the whole's is the sum; what each part
    saw whole (the files listed) the caller sets from the listing.
    """
    total: dict[str, Any] = {}
    for part in parts:
        for key, value in part.items():
            if isinstance(value, dict):
                total[key] = summed([total.get(key, {}), value])
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                total[key] = total.get(key, 0) + value
            else:
                total.setdefault(key, value)
    return total


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
        "previous_response_unresolved": f"Responses API call(s) without token ids whose {A.PREVIOUS_RESPONSE_ID} names "
                                        "no call of their episode: their prompt cannot be rebuilt without the earlier turns",
    }
    for reason, n in c["llm_calls"]["skipped"].items():
        notes.append(f"{n} {labels.get(reason, reason)}")
    if c["llm_calls"].get("retokenized"):
        notes.append(f"{c['llm_calls']['retokenized']} transition(s) have token ids rebuilt from their messages with "
                     f"--retokenize {options.retokenize} (token_source = '{A.TOKEN_SOURCE_RETOKENIZED}'): they may differ from "
                     "the tokens the policy sampled")
    if c["llm_calls"].get("retokenized_from_text"):
        notes.append(f"{c['llm_calls']['retokenized_from_text']} of the retokenized transition(s) have a response the chat "
                     f"template of --retokenize {options.retokenize} could not render (no tool_calls in the template, a "
                     "conversation it rejects, or no end-of-sequence token closing the turn): it is the output's text encoded "
                     "alone, a tool call as JSON text rather than the markup the model writes, so its ids are the likeliest to "
                     "differ from those sampled; retokenize with the model folder the server loads (its template renders tool "
                     "calls), or capture the server's token ids (tracerl's instrumentation or `tracerl gateway`)")
    unresolved = (c["llm_calls"].get("response_chains") or {}).get("previous_unresolved")
    if unresolved:
        notes.append(f"{unresolved} Responses API transition(s) continue a response ({A.PREVIOUS_RESPONSE_ID}) that is no "
                     "transition of their episode: their token ids are the server's, but their input_messages hold "
                     "only their own turn")
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
    problems = {why: n for why, n in (r.get("evaluations_skipped") or {}).items() if why in EVALUATION_PROBLEMS}
    if problems:
        notes.append(f"{sum(problems.values())} {A.GEN_AI_EVALUATION_RESULT_EVENT} event(s) not taken as rewards: "
                     + "; ".join(f"{n} x {EVALUATION_PROBLEMS[why]}" for why, n in problems.items()))
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
