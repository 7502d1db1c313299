"""Every table, view and macro a build creates in its DuckDB connection: who makes it, who reads it, its columns.

The stages of the pipeline talk to each other only through these relations: a stage
is a function that reads some of them and creates others. This registry is the one
list of them, in the order the stages create them; ``src/tracerl/pipeline/README.md`` shows it
(``python -m tracerl.pipeline.tables`` prints that table). ``tracerl.pipeline.build.STAGES``
is the wiring that runs the stages, and ``tests/pipeline/test_tables.py`` holds both to
this list: after a real build exactly these relations exist, with exactly these columns;
each module's stages run on a connection that holds only the relations listed as read by
it, make the ones listed as made by it, and fail when any one of their inputs is taken
away (so a relation read but not listed, or listed but not read, fails the test).

``made_by`` and ``read_by`` name modules of :mod:`tracerl.pipeline`. A *scratch*
relation is dropped (or unregistered) by the stage that made it; it never outlives
that stage.
"""

from __future__ import annotations

from dataclasses import dataclass

from tracerl.pipeline.normalize import EXTRACTED
from tracerl.schemas import DATASET_SCHEMA, REWARDS_SCHEMA, SPANS_SCHEMA


@dataclass(frozen=True)
class Relation:
    name: str
    kind: str  # "table", "view" or "macro" (columns: its parameters)
    made_by: str
    read_by: tuple[str, ...]
    columns: tuple[str, ...]
    meaning: str
    scratch: bool = False


_LLM_CALL = (
    "episode_id", "trace_id", "span_id", "parent_span_id", "name", "start_ns", "end_ns", "status_code", "agent_name",
    "policy_version", "policy_name", "response_id", "request_model", "has_tokens", "content_layout", "content_problem", "copies", "system",
    "file_index", "file_row",
)
_CALL_STATUS = (*_LLM_CALL, "task_id", "split", "truncated", "excluded")
_REWARD = ("episode_id", "time_ns", "name", "value", "source", "origin_trace_id", "origin_span_id", "response_id")
_CHOSEN = (
    "episode_id", "task_id", "split", "agent_name", "step", "policy_version", "policy_name", "trace_id", "span_id", "response_id",
    "file_index", "file_row", "content_layout", "has_tokens", "reward", "return", "advantage",
)
_SPAN_META = (
    "trace_id", "span_id", "parent_span_id", "name", "start_ns", "end_ns", "status_code", "status_message",
    "task_id", "split", "policy_version", "response_id", "request_model", "response_model", "has_tokens", "rollout_id", "attempt_id",
    "agent_name", "reward_attributes", "episode_attr", "reward_value", "reward_name", *EXTRACTED, "content_layout",
    "content_problem", "reward_events", "file_index", "file_row",
)

RELATIONS: tuple[Relation, ...] = (
    Relation("span_files", "table", "source", ("source",), ("file_index", "filename"),
             "the readable span files, numbered: file_index is a file's place in the list"),
    Relation("raw_spans", "view", "source", ("normalize", "doctor"),
             (*SPANS_SCHEMA.names, "file_index", "file_row"),
             "every row of every span file, columns unified to the spans schema; file_index/file_row locate the row"),
    Relation("log_records", "table", "log_content", ("log_content", "rewards"),
             ("trace_id", "span_id", "event_name", "body", "attributes", "time_unix_nano", "scope_name", "filename", "file_row_number"),
             "the GenAI event records (gen_ai.*) among the data dir's OTLP log records (logs/); content is read from the events log_content knows, "
             "rewards from gen_ai.evaluation.result"),
    Relation("log_content", "table", "log_content", ("normalize", "writer"), ("trace_id", "span_id", "input_messages", "output_messages"),
             "one row per span whose messages came as log records: its input and output messages as JSON"),
    Relation("judgments", "table", "judgment_log", ("judgment_log",),
             ("episode_id", "task_id", "judge_model", "rubric_sha256", "status", "reason", "score"),
             "the latest judgment of each episode under each judge model and rubric (the data dir's judgments/)"),
    Relation("late_rewards", "view", "source", ("rewards",), tuple(REWARDS_SCHEMA.names),
             "rewards from files (the data dir's rewards/ and --rewards), keyed by episode, trace, response or rollout id"),
    Relation("processed", "table", "build_output", ("selection",), ("episode_id",),
             "episodes already in the dataset's transitions (incremental builds skip them; empty otherwise)"),
    Relation("span_meta_raw", "table", "normalize", ("normalize",), (*_SPAN_META[:4], "scope_name", *_SPAN_META[4:]),
             "span_meta before duplicates are dropped and episodes resolved", scratch=True),
    Relation("span_meta", "table", "normalize", ("normalize", "episodes", "rewards", "credit", "build", "judge_events"),
             (*_SPAN_META, "episode_id", "is_llm", "is_tool"),
             "one light row per distinct span: the attributes the stages need, episode resolved, call/tool flags, "
             "content layout"),
    Relation("attr", "macro", "normalize", ("air", "judge", "sql"), ("a", "k"),
             "attr(attributes, 'key'): one attribute's value as text (AIR rules, `tracerl sql`)"),
    Relation("tool_call_arguments", "macro", "normalize", ("air",), ("a",),
             "tool_call_arguments(attributes): the arguments of every tool call a model output, in any content layout"),
    Relation("spans", "view", "normalize", ("air", "sql"), (*SPANS_SCHEMA.names, "is_llm", "is_tool"),
             "each distinct span with all its columns, the resolved episode_id and the call/tool flags "
             "(what AIR rules and `tracerl sql` query)"),
    Relation("llm_calls", "table", "normalize", ("normalize", "episodes", "rewards", "selection"), _LLM_CALL,
             "one row per distinct LLM call (copies merged by response id), agent name inherited from its agent span"),
    Relation("inherited_agent", "table", "normalize", ("normalize",), ("trace_id", "span_id", "agent"),
             "the nearest ancestor's agent name of calls that have none", scratch=True),
    Relation("episodes", "table", "episodes", ("rewards", "selection", "credit"),
             ("episode_id", "task_id", "split", "rollout_id", "attempt_id", "finished", "start_ns", "end_ns", "n_spans",
              "n_llm_spans", "pending", "truncated"),
             "one row per episode: task, split, agentlightning rollout and attempt ids, time bounds, "
             "finished / pending / truncated"),
    Relation("air_hits", "table", "air", ("rewards",),
             ("episode_id", "trace_id", "span_id", "start_time_unix_nano", "end_time_unix_nano", "hits"),
             "spans that match an AIR rule, one boolean per rule (all rules in one scan); air's SELECT of them "
             "becomes part of rewards"),
    Relation("evaluations", "table", "rewards", ("rewards",),
             ("episode_id", "time_ns", "name", "value", "label", "skipped", "carrier", "trace_id", "span_id", "response_id", "event_time_ns"),
             "every gen_ai.evaluation.result event (log record or span event), placed on the call or span it evaluates; "
             "skipped: why it is no reward (NULL: it is one)"),
    Relation("rewards", "table", "rewards", ("selection",), _REWARD,
             "every reward (span, event, late file, evaluation event, AIR) with the time it refers to; NULL where it cannot be placed"),
    Relation("call_status", "table", "selection", ("selection",), _CALL_STATUS,
             "every LLM call with its episode's task/split and the reason it is not a policy call (NULL if it is)"),
    Relation("policy_calls", "table", "selection", ("selection", "credit", "judge_events"), (*_CALL_STATUS, "step"),
             "the calls that are the policy's transitions, numbered by step within their episode"),
    Relation("reward_weights", "table", "selection", ("selection",), ("name", "weight"),
             "the --reward-weight NAME=WEIGHT pairs"),
    Relation("attached_rewards", "table", "selection", ("credit",), (*_REWARD, "weight", "step"),
             "each placeable reward with its weight and the step of the policy call that receives it"),
    Relation("rewarded_episodes", "table", "credit", ("credit",), ("episode_id",),
             "episodes that received an outcome reward with a non-zero weight"),
    Relation("chosen", "table", "credit", ("writer", "doctor", "sql"), _CHOSEN,
             "the calls that become transitions (token ids present), with reward, return, advantage and the "
             "file/row of their span"),
    Relation("writer_rows", "table", "writer", ("writer",), (*_CHOSEN, "ready_at"),
             "the chosen calls with the span file that completes their episode (ready_at), read a span file's rows at a time",
             scratch=True),
    Relation("writer_tokens", "view", "writer", ("writer",), ("prompt_token_ids", "response_token_ids", "response_logprobs", "attributes"),
             "the rows being written whose span has no tracerl token columns, to read another convention's token "
             "attributes in DuckDB (registered Arrow)", scratch=True),
    Relation("writer_part", "view", "writer", ("writer",), ("content_layout", "attributes", "events", "trace_id", "span_id", "position"),
             "the attributes, events and span of the rows being written, to read JSON messages in DuckDB (registered Arrow)",
             scratch=True),
    Relation("transitions", "view", "sql", (), tuple(DATASET_SCHEMA.names),
             "`tracerl sql` only: the dataset's rows, or before a build the chosen calls in the dataset's columns"),
)

# relations that exist after analyze() (the build's stages before the write)
AFTER_ANALYZE = tuple(r for r in RELATIONS if not r.scratch and r.kind != "macro" and r.made_by not in ("writer", "sql"))

_SCHEMAS = {"spans schema": SPANS_SCHEMA, "rewards schema": REWARDS_SCHEMA, "dataset schema": DATASET_SCHEMA}


def _columns_text(columns: tuple[str, ...]) -> str:
    """Columns for the README: a schema's columns are named by the schema, the rest listed."""
    for label, schema in _SCHEMAS.items():
        names = tuple(schema.names)
        if columns[: len(names)] == names:
            rest = columns[len(names):]
            return f"all of the {label}" + (" + " + ", ".join(rest) if rest else "")
    return ", ".join(columns)


def markdown() -> str:
    """The registry as the Markdown table of ``src/tracerl/pipeline/README.md``."""
    lines = ["| relation | made by | read by | columns | meaning |", "|---|---|---|---|---|"]
    for r in RELATIONS:
        kind = r.kind + (", scratch" if r.scratch else "")
        lines.append(
            f"| `{r.name}` ({kind}) | {r.made_by} | {', '.join(r.read_by) or 'you'} | {_columns_text(r.columns)} | {r.meaning} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
