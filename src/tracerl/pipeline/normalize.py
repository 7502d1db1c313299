"""Spans of every supported layout -> one light span table and one LLM-call table (DuckDB).

``span_meta`` holds one row per distinct span (an exporter retry or a collector
redelivery writes the same span twice) with the few attributes the pipeline needs,
parsed from the attribute JSON once. Token arrays and message text stay in the Parquet
files; they are fetched only for the rows that become transitions, which keeps the
build out of core.

``spans`` is the view every query and AIR rule reads: each distinct span with all its
columns and what ``span_meta`` resolved (episode, is it an LLM call, a tool).

``llm_calls`` holds one row per distinct LLM call: the same call recorded by the
client instrumentation and by a gateway shares a response id and is merged, taking
the token ids from whichever span has them and the episode from whichever knows it.
"""

from __future__ import annotations

from typing import Any

import duckdb

from tracerl.pipeline.counts import grouped, scalar
from tracerl.pipeline.layouts import (
    AGENT_NAME_SOURCES, CONTENT_LAYOUTS, EPISODE_LAYOUTS, NO_CONTENT, REWARD_LAYOUTS, TOKEN_LAYOUTS, attribute_path,
    tokens_sql,
)
from tracerl.pipeline.sql_text import sql_str
from tracerl.schemas import attributes as A

# column of span_meta -> attribute; all are extracted with one JSON parse per span
EXTRACTED = {
    "gen_ai_system": A.GEN_AI_SYSTEM,
    "gen_ai_provider": A.GEN_AI_PROVIDER_NAME,
    "gen_ai_operation": A.GEN_AI_OPERATION,
    "llm_request_type": A.OPENLLMETRY_REQUEST_TYPE,
    "gen_ai_request_type": A.AGENTOPS_REQUEST_TYPE,
    "openinference_kind": A.OPENINFERENCE_SPAN_KIND,
    "agentops_kind": A.AGENTOPS_SPAN_KIND,
    "traceloop_kind": A.TRACELOOP_SPAN_KIND,
    "tool_name": A.GEN_AI_TOOL_NAME,
}
# read in the same parse but not kept as columns: reward fallbacks, and the message
# attributes of JSON content layouts (only tested for presence: text stays in the files)
_REWARD_KEYS = (A.REWARD_VALUE, A.REWARD_NAME)
_MESSAGE_KEYS = tuple(key for layout in CONTENT_LAYOUTS if layout.on_span_attributes and not layout.flattened
                      for key in (layout.input, layout.output))
# ... and what other conventions than tracerl's own put in the attributes (src/tracerl/pipeline/layouts.py)
_FOREIGN_KEYS = tuple(dict.fromkeys([
    *(layout.completion_token_ids for layout in TOKEN_LAYOUTS),
    *(key for layout in EPISODE_LAYOUTS for key in (layout.rollout, layout.attempt)),
    *(layout.key for layout in REWARD_LAYOUTS if layout.form != "dimensions"),
    *(source.key for source in AGENT_NAME_SOURCES),
]))

def _content_layout_sql(at: dict[str, str]) -> str:
    """CASE naming the first layout of CONTENT_LAYOUTS a span's attributes use (``at``: key -> extracted value)."""
    whens = []
    for layout in CONTENT_LAYOUTS:
        if layout.flattened:  # a key such as "gen_ai.prompt.0.role" in the attribute JSON
            test = " OR ".join(f"contains(attributes, {sql_str(chr(34) + p + '.')})" for p in (layout.input, layout.output))
        elif layout.event:  # the event's name in the span's event JSON
            test = f"contains(coalesce(events, ''), {sql_str(chr(34) + layout.event + chr(34))})"
        elif layout.logs:  # log records of the span hold its messages (src/tracerl/pipeline/log_content.py)
            test = "has_log_content"
        else:
            test = " OR ".join(f"{at[key]} IS NOT NULL" for key in (layout.input, layout.output))
        whens.append(f"WHEN {test} THEN {sql_str(layout.name)}")
    return f"CASE {' '.join(whens)} ELSE {sql_str(NO_CONTENT)} END"


def _content_problem_sql(at: dict[str, str]) -> str:
    """Why a span's message JSON (the JSON layouts on span attributes) cannot be read: 'truncated'
    when capture cut it at its size limit, 'invalid_json' otherwise (another tool's length limit,
    OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT, or a bug); NULL when it reads or there is none."""
    broken = " OR ".join(f"({at[key]} IS NOT NULL AND NOT json_valid({at[key]}))" for key in _MESSAGE_KEYS)
    cut = " OR ".join(f"ends_with({at[key]}, {sql_str(A.TRUNCATED_MARK)})" for key in _MESSAGE_KEYS)
    return f"CASE WHEN {broken} THEN CASE WHEN {cut} THEN 'truncated' ELSE 'invalid_json' END END"


def _foreign_sql(at: dict[str, str]) -> str:
    """Columns of span_meta_raw read from other conventions' layouts (``at``: key -> extracted value)."""
    has_tokens = " OR ".join(
        ["completion_token_ids IS NOT NULL", *(f"{at[layout.completion_token_ids]} IS NOT NULL" for layout in TOKEN_LAYOUTS)]
    )

    def episode_id(side: str) -> str:  # the span's own attribute wins over its resource's
        keys = [getattr(layout, side) for layout in EPISODE_LAYOUTS]
        return "coalesce(" + ", ".join(
            [f"nullif({at[key]}, '')" for key in keys]
            + [f"CASE WHEN contains(resource, {sql_str(chr(34) + key + chr(34))}) "
               f"THEN nullif(json_extract_string(resource, {attribute_path(key)}), '') END" for key in keys]
        ) + ")"

    names = []
    for source in AGENT_NAME_SOURCES:
        value = at[source.key]
        if source.agentops_kind:
            value = f"CASE WHEN {at[A.AGENTOPS_SPAN_KIND]} = {sql_str(source.agentops_kind)} THEN {value} END"
        names.append(value)
    reward_tests = []
    for layout in REWARD_LAYOUTS:
        if layout.form == "dimensions":
            test = f"contains(attributes, {sql_str(chr(34) + layout.key + '.')})"
        else:
            test = f"{at[layout.key]} IS NOT NULL"
        if layout.span_name:
            test = f"(name = {sql_str(layout.span_name)} AND {test})"
        reward_tests.append(test)
    return (
        f"{has_tokens} AS has_tokens, {episode_id('rollout')} AS rollout_id, {episode_id('attempt')} AS attempt_id, "
        f"coalesce(agent_name, {', '.join(names)}) AS agent_name, "
        f"CASE WHEN {' OR '.join(reward_tests)} THEN attributes END AS reward_attributes"
    )


def _tool_call_arguments_sql() -> str:
    """Body of the macro ``tool_call_arguments(a)``: the arguments of every output tool call, in any layout."""
    parts = []
    for layout in CONTENT_LAYOUTS:
        if not layout.on_span_attributes:  # the macro reads a span's attributes only
            continue
        if layout.flattened:
            keys = f"list_filter(json_keys(a), lambda k: regexp_matches(k, {sql_str(layout.tool_call_arguments_key())}))"
            parts.append(f"CASE WHEN contains(a, {sql_str('.' + layout.tool_calls + '.')}) "
                         f"THEN list_transform({keys}, lambda k: attr(a, k)) END")
        else:
            parts.append(f"CASE WHEN contains(a, {sql_str(A.GEN_AI_TOOL_CALL_PART)}) "
                         f"THEN json_extract_string(attr(a, {sql_str(layout.output)}), {sql_str(layout.tool_call_arguments)}) END")
    return "flatten([" + ", ".join(f"coalesce({p}, []::VARCHAR[])" for p in parts) + "])"


# attr(attributes, 'key') reads one attribute (in AIR rules and `tracerl sql`);
# tool_call_arguments(attributes) lists the arguments of the tool calls a model output
MACROS = f"""
CREATE OR REPLACE MACRO attr(a, k) AS json_extract_string(a, '$."' || k || '"');
CREATE OR REPLACE MACRO tool_call_arguments(a) AS {_tool_call_arguments_sql()};
"""


def build_span_meta(con: duckdb.DuckDBPyConnection) -> None:
    """Table ``span_meta``: one row per (trace_id, span_id), episode resolved, call/tool flags and content layout set."""
    con.execute(MACROS)
    keys = list(dict.fromkeys([*EXTRACTED.values(), *_REWARD_KEYS, *_MESSAGE_KEYS, *_FOREIGN_KEYS]))
    paths = "[" + ", ".join(sql_str(f'$."{key}"') for key in keys) + "]"
    at = {key: f"x[{i + 1}]" for i, key in enumerate(keys)}  # DuckDB lists are 1-based
    picked = ", ".join(f"{at[key]} AS {column}" for column, key in EXTRACTED.items())
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE span_meta_raw AS
        SELECT trace_id, span_id, parent_span_id, name, scope_name, start_time_unix_nano AS start_ns,
               end_time_unix_nano AS end_ns, status_code, status_message,
               task_id, split, policy_version, response_id, request_model, response_model,
               -- only the (short) completion column is tested here: testing the prompt column
               -- would decode every prompt token; a missing prompt is caught when writing
               {_foreign_sql(at)},
               -- tracerl's episode, else a rollout's attempt (DuckDB reads the aliases just made)
               coalesce(episode_id, rollout_id || coalesce(':' || attempt_id, '')) AS episode_attr,
               coalesce(reward_value, TRY_CAST({at[A.REWARD_VALUE]} AS DOUBLE)) AS reward_value,
               coalesce(reward_name, {at[A.REWARD_NAME]}) AS reward_name,
               {picked},
               {_content_layout_sql(at)} AS content_layout,
               {_content_problem_sql(at)} AS content_problem,
               -- the events of a span that holds reward events: tracerl's, or evaluation results (rewards.py)
               CASE WHEN events LIKE '%"{A.REWARD_EVENT_NAME}"%' OR events LIKE '%"{A.GEN_AI_EVALUATION_RESULT_EVENT}"%'
                    THEN events END AS reward_events,
               file_index, file_row
        FROM (SELECT *, json_extract_string(attributes, {paths}) AS x FROM raw_spans)
        LEFT JOIN (SELECT trace_id, span_id, true AS has_log_content FROM log_content) USING (trace_id, span_id)
        """
    )
    duplicates = con.execute(
        "SELECT count(*) - count(DISTINCT hash(trace_id, span_id)) FROM span_meta_raw"
    ).fetchall()[0][0]
    if duplicates:
        # the same span delivered twice (exporter retry, collector redelivery): keep one copy,
        # the one with token ids if only one has them
        con.execute(
            """
            CREATE OR REPLACE TEMP TABLE span_meta_raw AS SELECT * FROM span_meta_raw
            QUALIFY row_number() OVER (
                PARTITION BY trace_id, span_id ORDER BY has_tokens DESC, end_ns DESC, file_index, file_row) = 1
            """
        )
    ops = ", ".join(sql_str(o) for o in A.LLM_OPERATIONS)
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE span_meta AS
        WITH trace_episode AS (
            -- spans that missed the episode's baggage inherit it when their trace has exactly one
            SELECT trace_id, CASE WHEN count(DISTINCT episode_attr) = 1 THEN max(episode_attr) END AS episode
            FROM span_meta_raw WHERE episode_attr IS NOT NULL GROUP BY trace_id
        )
        SELECT s.* EXCLUDE (scope_name),  -- read for is_llm only
               coalesce(s.episode_attr, t.episode, s.trace_id) AS episode_id,
               s.name NOT IN ('{A.REWARD_SPAN_NAME}', '{A.EPISODE_SPAN_NAME}') AND (
                   s.has_tokens
                   OR s.gen_ai_operation IN ({ops})
                   OR s.llm_request_type IN ({ops})
                   OR s.gen_ai_request_type IN ({ops})
                   OR upper(s.openinference_kind) = 'LLM'
                   OR lower(s.agentops_kind) = 'llm'
                   OR ((s.gen_ai_system IS NOT NULL OR s.gen_ai_provider IS NOT NULL)
                       AND s.gen_ai_operation IS NULL AND s.llm_request_type IS NULL AND s.gen_ai_request_type IS NULL
                       AND s.openinference_kind IS NULL AND s.traceloop_kind IS NULL
                       -- the Anthropic SDK names its provider on the span of every call; only its
                       -- messages.create (operation chat) generates: count_tokens, models.list do not
                       AND s.scope_name IS DISTINCT FROM {sql_str(A.ANTHROPIC_SDK_SCOPE)})
               ) AS is_llm,
               (s.gen_ai_operation = '{A.GEN_AI_EXECUTE_TOOL}' OR upper(s.openinference_kind) = 'TOOL'
                OR lower(s.traceloop_kind) = 'tool' OR lower(s.agentops_kind) = 'tool'
                OR s.tool_name IS NOT NULL) AS is_tool
        FROM span_meta_raw s LEFT JOIN trace_episode t USING (trace_id)
        """
    )
    con.execute("DROP TABLE span_meta_raw")


def build_spans_view(con: duckdb.DuckDBPyConnection) -> None:
    """View ``spans``: every span (one copy each) with all its columns, the resolved episode id and the call/tool flags.

    What AIR rules and ``tracerl sql`` users query; the token arrays stay in the files
    until a query asks for them. Token columns and the agent name are filled from other
    conventions' attributes where tracerl's are absent (``layouts.py``).
    """
    tokens = ", ".join(
        f"{tokens_sql(kind, 'r.' + column, 'r.attributes')} AS {column}"
        for kind, column in (("prompt", "prompt_token_ids"), ("completion", "completion_token_ids"),
                             ("logprobs", "completion_logprobs"))
    )
    con.execute(
        f"""
        CREATE OR REPLACE VIEW spans AS
        SELECT r.* EXCLUDE (file_index, file_row) REPLACE (m.episode_id AS episode_id, m.agent_name AS agent_name, {tokens}),
               m.is_llm, m.is_tool
        FROM raw_spans r JOIN span_meta m ON r.file_index = m.file_index AND r.file_row = m.file_row
        """
    )


def build_llm_calls(con: duckdb.DuckDBPyConnection) -> None:
    """Table ``llm_calls``: one row per distinct LLM call (merged by response id).

    ``file_index``/``file_row`` locate the span whose token ids and messages are used.
    """
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE llm_calls AS
        WITH c AS (
            SELECT *, coalesce(response_id, trace_id || ':' || span_id) AS call_key
            FROM span_meta WHERE is_llm
        ),
        ranked AS (
            SELECT *,
                first_value(episode_id) OVER (PARTITION BY call_key
                    ORDER BY episode_attr IS NULL, start_ns, span_id) AS call_episode_id,
                first_value(agent_name IGNORE NULLS) OVER (PARTITION BY call_key
                    ORDER BY episode_attr IS NULL, start_ns, span_id
                    ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) AS call_agent,
                first_value(coalesce(response_model, request_model) IGNORE NULLS) OVER (PARTITION BY call_key
                    ORDER BY has_tokens DESC, start_ns, span_id
                    ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) AS call_policy_name,
                first_value(policy_version IGNORE NULLS) OVER (PARTITION BY call_key
                    ORDER BY has_tokens DESC, start_ns, span_id
                    ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) AS call_policy_version,
                row_number() OVER (PARTITION BY call_key
                    ORDER BY has_tokens DESC, content_layout = '{NO_CONTENT}', start_ns, span_id) AS rank_in_key,
                count(*) OVER (PARTITION BY call_key) AS copies
            FROM c
        )
        SELECT
            call_episode_id AS episode_id, trace_id, span_id, parent_span_id, name,
            start_ns, end_ns, status_code, call_agent AS agent_name,
            call_policy_version AS policy_version, call_policy_name AS policy_name, response_id, request_model,
            has_tokens, content_layout, content_problem, copies,
            coalesce(gen_ai_system, gen_ai_provider) AS system,
            file_index, file_row
        FROM ranked WHERE rank_in_key = 1
        """
    )
    _inherit_agent_names(con)


def _inherit_agent_names(con: duckdb.DuckDBPyConnection) -> None:
    """A call without an agent name takes the name of its nearest ancestor span that has one.

    Frameworks put ``gen_ai.agent.name`` on the agent span, not on the LLM calls under it.
    """
    con.execute(
        """
        CREATE OR REPLACE TEMP TABLE inherited_agent AS
        WITH RECURSIVE up(trace_id, span_id, cursor, agent, depth) AS (
            SELECT trace_id, span_id, parent_span_id, NULL::VARCHAR, 0
            FROM llm_calls WHERE agent_name IS NULL AND parent_span_id IS NOT NULL
            UNION ALL
            SELECT up.trace_id, up.span_id, s.parent_span_id, s.agent_name, up.depth + 1
            FROM up JOIN span_meta s ON s.trace_id = up.trace_id AND s.span_id = up.cursor
            WHERE up.agent IS NULL AND up.depth < 64
        )
        SELECT trace_id, span_id, max(agent) AS agent FROM up WHERE agent IS NOT NULL GROUP BY ALL
        """
    )
    con.execute(
        """
        UPDATE llm_calls SET agent_name = i.agent FROM inherited_agent i
        WHERE llm_calls.trace_id = i.trace_id AND llm_calls.span_id = i.span_id
        """
    )
    con.execute("DROP TABLE inherited_agent")


def counts(con: duckdb.DuckDBPyConnection) -> dict[str, Any]:
    """Spans read and kept, the content layouts and problems of the LLM calls, the calls by agent and policy."""
    http_requests = f"FROM raw_spans WHERE attributes LIKE {sql_str('%' + A.HTTP_LLM_REQUEST + '%')}"
    return {
        "logs": {"span_missing": scalar(
            con, "SELECT count(*) FROM log_content WHERE (trace_id, span_id) NOT IN (SELECT (trace_id, span_id) FROM span_meta)"
        )},
        "spans": {
            "rows": scalar(con, "SELECT count(*) FROM raw_spans"),
            "distinct": scalar(con, "SELECT count(*) FROM span_meta"),
            "content_layouts": grouped(con, "SELECT content_layout, count(*) FROM llm_calls GROUP BY 1 ORDER BY 1"),
            # calls whose message JSON does not read: kept as text, still trained on from their token ids
            "content_problems": grouped(
                con, "SELECT content_problem, count(*) FROM llm_calls WHERE content_problem IS NOT NULL GROUP BY 1 ORDER BY 1"
            ),
            # HTTP client spans of LLM requests: a captured call's transport, or a request no hook recognised
            "http_llm_requests": grouped(con, f"SELECT attr(attributes, {sql_str(A.HTTP_LLM_REQUEST)}), count(*) {http_requests} GROUP BY 1 ORDER BY 1"),
            "unrecognised_llm_requests": grouped(
                con,
                f"SELECT coalesce(attr(attributes, {sql_str(A.URL_FULL)}), attr(attributes, {sql_str(A.HTTP_URL_OLD)})), count(*) "
                f"{http_requests} AND attr(attributes, {sql_str(A.HTTP_LLM_REQUEST)}) = {sql_str(A.HTTP_LLM_REQUEST_UNRECOGNISED)} "
                "GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 5",
            ),
        },
        "llm_calls": {
            "total": scalar(con, "SELECT count(*) FROM llm_calls"),
            "merged_duplicates": scalar(con, "SELECT coalesce(sum(copies - 1), 0) FROM llm_calls"),
            "by_agent": grouped(
                con, "SELECT coalesce(agent_name, '(none)'), count(*) FROM llm_calls GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 20"
            ),
            "by_policy": grouped(
                con, "SELECT coalesce(policy_name, '(none)'), count(*) FROM llm_calls GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 20"
            ),
        },
    }
