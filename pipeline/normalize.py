"""Spans of every supported layout -> one light span table and one LLM-call table (DuckDB).

``span_meta`` holds one row per distinct span (an exporter retry or a collector
redelivery writes the same span twice) with the few attributes the pipeline needs,
parsed from the attribute JSON once. Token arrays and message text stay in the Parquet
files; they are fetched only for the rows that become transitions, which keeps the
build out of core.

``llm_calls`` holds one row per distinct LLM call: the same call recorded by the
client instrumentation and by a gateway shares a response id and is merged, taking
the token ids from whichever span has them and the episode from whichever knows it.
"""

from __future__ import annotations

import duckdb

from tracerl.schemas import attributes as A

# attribute -> column of span_meta; extracted with one JSON parse per span
EXTRACTED = {
    "gen_ai_system": A.GEN_AI_SYSTEM,
    "gen_ai_provider": "gen_ai.provider.name",
    "gen_ai_operation": A.GEN_AI_OPERATION,
    "llm_request_type": "llm.request.type",
    "gen_ai_request_type": "gen_ai.request.type",  # agentops' older layout
    "openinference_kind": "openinference.span.kind",
    "agentops_kind": "agentops.span.kind",
    "traceloop_kind": "traceloop.span.kind",
    "tool_name": "gen_ai.tool.name",
    "input_messages": A.GEN_AI_INPUT_MESSAGES,  # only tested for presence: text stays in the files
    "output_messages": A.GEN_AI_OUTPUT_MESSAGES,
    "attr_reward_value": A.REWARD_VALUE,
    "attr_reward_name": A.REWARD_NAME,
}

# LLM-call operations of the GenAI conventions (OpenLLMetry's llm.request.type uses the first two)
LLM_OPERATIONS = ("chat", "completion", "text_completion", "generate_content")

FLAT_CONTENT = (
    "attributes LIKE '%\"gen_ai.prompt.%' OR attributes LIKE '%\"gen_ai.completion.%' "
    "OR attributes LIKE '%\"llm.input_messages.%' OR attributes LIKE '%\"llm.output_messages.%'"
)

MACROS = """
CREATE OR REPLACE MACRO attr(a, k) AS json_extract_string(a, '$."' || k || '"');
CREATE OR REPLACE MACRO tool_call_arguments(a) AS list_concat(
    CASE WHEN a LIKE '%tool_call%' THEN
        coalesce(json_extract_string(attr(a, 'gen_ai.output.messages'), '$[*].parts[*].arguments'), []) END,
    CASE WHEN a LIKE '%.tool_calls.%' THEN list_transform(
        list_filter(json_keys(a), lambda k: regexp_matches(k,
            '^(gen_ai\\.completion\\.\\d+\\.tool_calls\\.\\d+\\.arguments|llm\\.output_messages\\.\\d+\\.message\\.tool_calls\\.\\d+\\.tool_call\\.function\\.arguments)$')),
        lambda k: attr(a, k)) END);
"""


def _sql_str(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def build_span_meta(con: duckdb.DuckDBPyConnection) -> None:
    """Table ``span_meta``: one row per (trace_id, span_id), episode resolved, layout flags set."""
    con.execute(MACROS)
    names = list(EXTRACTED)
    paths = "[" + ", ".join(_sql_str(f'$."{EXTRACTED[n]}"') for n in names) + "]"
    at = {name: f"x[{i + 1}]" for i, name in enumerate(names)}  # DuckDB lists are 1-based
    text_only = ("input_messages", "output_messages", "attr_reward_value", "attr_reward_name")
    picked = ", ".join(f"{at[name]} AS {name}" for name in names if name not in text_only)
    ops = ", ".join(_sql_str(o) for o in LLM_OPERATIONS)
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE span_meta_raw AS
        SELECT trace_id, span_id, parent_span_id, name, start_time_unix_nano AS start_ns,
               end_time_unix_nano AS end_ns, status_code, status_message,
               episode_id AS episode_attr, task_id, split, agent_name, policy_version, response_id,
               request_model,
               -- only the (short) completion column is tested here: testing the prompt column
               -- would decode every prompt token; a missing prompt is caught when writing
               completion_token_ids IS NOT NULL AS has_tokens,
               coalesce(reward_value, TRY_CAST({at['attr_reward_value']} AS DOUBLE)) AS reward_value,
               coalesce(reward_name, {at['attr_reward_name']}) AS reward_name,
               {picked},
               {at['input_messages']} IS NOT NULL OR {at['output_messages']} IS NOT NULL AS has_messages,
               CASE WHEN {at['input_messages']} IS NULL AND {at['output_messages']} IS NULL
                    THEN ({FLAT_CONTENT}) ELSE false END AS flat_content,
               CASE WHEN events LIKE '%"{A.REWARD_EVENT_NAME}"%' THEN events END AS reward_events,
               file_index, file_row
        FROM (SELECT *, json_extract_string(attributes, {paths}) AS x FROM raw_spans)
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
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE span_meta AS
        WITH trace_episode AS (
            -- spans that missed the episode's baggage inherit it when their trace has exactly one
            SELECT trace_id, CASE WHEN count(DISTINCT episode_attr) = 1 THEN max(episode_attr) END AS episode
            FROM span_meta_raw WHERE episode_attr IS NOT NULL GROUP BY trace_id
        )
        SELECT s.*,
               coalesce(s.episode_attr, t.episode, s.trace_id) AS episode_id,
               s.name NOT IN ('{A.REWARD_SPAN_NAME}', '{A.EPISODE_SPAN_NAME}') AND (
                   s.has_tokens
                   OR s.gen_ai_operation IN ({ops})
                   OR s.llm_request_type IN ('chat', 'completion')
                   OR s.gen_ai_request_type IN ('chat', 'completion')
                   OR upper(s.openinference_kind) = 'LLM'
                   OR lower(s.agentops_kind) = 'llm'
                   OR ((s.gen_ai_system IS NOT NULL OR s.gen_ai_provider IS NOT NULL)
                       AND s.gen_ai_operation IS NULL AND s.llm_request_type IS NULL AND s.gen_ai_request_type IS NULL
                       AND s.openinference_kind IS NULL AND s.traceloop_kind IS NULL)
               ) AS is_llm,
               (s.gen_ai_operation = 'execute_tool' OR upper(s.openinference_kind) = 'TOOL'
                OR lower(s.traceloop_kind) = 'tool' OR lower(s.agentops_kind) = 'tool'
                OR s.tool_name IS NOT NULL) AS is_tool,
               CASE
                   WHEN s.has_messages THEN 'gen_ai.messages'
                   WHEN s.flat_content THEN 'flattened'
                   ELSE 'none'
               END AS content_layout
        FROM span_meta_raw s LEFT JOIN trace_episode t USING (trace_id)
        """
    )
    con.execute("DROP TABLE span_meta_raw")


def build_llm_calls(con: duckdb.DuckDBPyConnection) -> None:
    """Table ``llm_calls``: one row per distinct LLM call (merged by response id).

    ``file_index``/``file_row`` locate the span whose token ids and messages are used.
    """
    con.execute(
        """
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
                first_value(policy_version IGNORE NULLS) OVER (PARTITION BY call_key
                    ORDER BY has_tokens DESC, start_ns, span_id
                    ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) AS call_policy_version,
                row_number() OVER (PARTITION BY call_key
                    ORDER BY has_tokens DESC, content_layout = 'none', start_ns, span_id) AS rank_in_key,
                count(*) OVER (PARTITION BY call_key) AS copies
            FROM c
        )
        SELECT
            call_episode_id AS episode_id, trace_id, span_id, parent_span_id, name,
            start_ns, end_ns, status_code, call_agent AS agent_name,
            call_policy_version AS policy_version, response_id, request_model,
            has_tokens, content_layout, copies,
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
