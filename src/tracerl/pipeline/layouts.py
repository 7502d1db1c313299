"""Where each tracing convention keeps what the pipeline reads, declared as data.

Chat messages (:data:`CONTENT_LAYOUTS`), and for conventions other than tracerl's own:
exact token ids and log-probs (:data:`TOKEN_LAYOUTS`), episode ids
(:data:`EPISODE_LAYOUTS`), rewards (:data:`REWARD_LAYOUTS`) and agent names
(:data:`AGENT_NAME_SOURCES`); agentlightning 0.3's spans are read through these.

Instrumentations record the same conversation in different attribute layouts: the
current GenAI convention as one JSON attribute per side, OpenLLMetry (and GenAI before
1.37) and OpenInference flattened into one attribute per field. Each layout is one
entry of :data:`CONTENT_LAYOUTS`; the code that reads messages is written once against
this description:

- :mod:`tracerl.pipeline.normalize` names each call's layout (``content_layout``, the
  first entry that matches) and finds the tool-call arguments the AIR rules check;
- :mod:`tracerl.pipeline.writer` and :mod:`tracerl.pipeline.messages` turn the layout's
  attributes into the dataset's message JSON.

A new convention is a new entry here (with its keys in ``tracerl.schemas.attributes``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tracerl.pipeline.sql_text import sql_str
from tracerl.schemas import attributes as A

NO_CONTENT = "none"  # content_layout of a call whose messages were not recorded


@dataclass(frozen=True)
class ContentLayout:
    """How one convention records the input and output messages of an LLM call.

    ``flattened=False``: ``input``/``output`` are attributes holding the messages as JSON
    and ``tool_call_arguments`` is a JSONPath into the output JSON; with ``event`` set, they
    are attributes of the span's event of that name instead of the span's own; with ``logs``,
    the messages come from OTLP log records of the span (the ``log_content`` table).
    ``flattened=True``: ``input``/``output`` are key prefixes; message ``i`` has its fields
    under ``{prefix}.{i}.`` (``{prefix}.{i}.{message}.`` when ``message`` is set), its tool
    call ``j`` under ``…{tool_calls}.{j}.``, with the call's id, name and arguments at
    ``tool_call_id``/``tool_call_name``/``tool_call_arguments``.
    """

    name: str
    convention: str
    input: str
    output: str
    flattened: bool
    tool_call_arguments: str
    message: str = ""
    tool_calls: str = ""
    tool_call_id: str = ""
    tool_call_name: str = ""
    event: str = ""
    logs: bool = False

    @property
    def on_span_attributes(self) -> bool:
        """Whether the messages sit in the span's own attributes (not in an event or in log records)."""
        return not (self.event or self.logs)

    def tool_call_arguments_key(self) -> str:
        """Regex (RE2 and Python) of the attribute keys that hold an output tool call's arguments."""
        message = re.escape(self.message) + r"\." if self.message else ""
        return (
            "^" + re.escape(self.output) + r"\.\d+\." + message + re.escape(self.tool_calls)
            + r"\.\d+\." + re.escape(self.tool_call_arguments) + "$"
        )


CONTENT_LAYOUTS: tuple[ContentLayout, ...] = (
    ContentLayout(
        name="gen_ai.messages", convention="OpenTelemetry GenAI (1.37+)",
        input=A.GEN_AI_INPUT_MESSAGES, output=A.GEN_AI_OUTPUT_MESSAGES, flattened=False,
        tool_call_arguments=f"$[*].{A.GEN_AI_MESSAGE_PARTS}[*].{A.GEN_AI_TOOL_CALL_ARGUMENTS}",
    ),
    ContentLayout(
        name="gen_ai.event", convention="OpenTelemetry GenAI, content as the operation-details event",
        input=A.GEN_AI_INPUT_MESSAGES, output=A.GEN_AI_OUTPUT_MESSAGES, flattened=False, event=A.GEN_AI_OPERATION_DETAILS_EVENT,
        tool_call_arguments=f"$[*].{A.GEN_AI_MESSAGE_PARTS}[*].{A.GEN_AI_TOOL_CALL_ARGUMENTS}",
    ),
    ContentLayout(
        name="openllmetry", convention="OpenLLMetry / traceloop (and GenAI before 1.37)",
        input=A.OPENLLMETRY_PROMPTS, output=A.OPENLLMETRY_COMPLETIONS, flattened=True,
        tool_calls=A.OPENLLMETRY_TOOL_CALLS, tool_call_id=A.OPENLLMETRY_TOOL_CALL_ID,
        tool_call_name=A.OPENLLMETRY_TOOL_CALL_NAME, tool_call_arguments=A.OPENLLMETRY_TOOL_CALL_ARGUMENTS,
    ),
    ContentLayout(
        name="openinference", convention="OpenInference (Arize Phoenix)",
        input=A.OPENINFERENCE_INPUT_MESSAGES, output=A.OPENINFERENCE_OUTPUT_MESSAGES, flattened=True,
        message=A.OPENINFERENCE_MESSAGE, tool_calls=A.OPENINFERENCE_MESSAGE_TOOL_CALLS,
        tool_call_id=A.OPENINFERENCE_TOOL_CALL_ID, tool_call_name=A.OPENINFERENCE_TOOL_CALL_NAME,
        tool_call_arguments=A.OPENINFERENCE_TOOL_CALL_ARGUMENTS,
    ),
    # last: content on the span itself wins over log records of it
    ContentLayout(
        name="gen_ai.log", convention="OpenTelemetry GenAI, content as log records (the operation-details event, "
        "or the per-message events before 1.37)", input=A.GEN_AI_INPUT_MESSAGES, output=A.GEN_AI_OUTPUT_MESSAGES,
        flattened=False, logs=True, tool_call_arguments="",
    ),
)


def attribute_path(key: str) -> str:
    """The JSONPath of a top-level attribute ``key`` (keys hold dots), as a SQL string literal."""
    return sql_str(f'$."{key}"')


def content_layout(name: str) -> ContentLayout:
    """The layout called ``name`` (a ``content_layout`` value other than ``none``)."""
    for layout in CONTENT_LAYOUTS:
        if layout.name == name:
            return layout
    raise KeyError(f"no content layout {name!r}: known are {', '.join(l.name for l in CONTENT_LAYOUTS)}")


# ---------------------------------------------------------------------------------------
# Conventions other than tracerl's own for what training needs: token ids and log-probs,
# the episode, rewards and agent names. tracerl's own (``tracerl.*`` attributes, promoted to
# columns of the spans table) always win; these are read where those are absent.
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TokenLayout:
    """Where a convention keeps an LLM call's exact tokens as attributes of the call's span.

    ``prompt_token_ids``/``completion_token_ids`` hold arrays of ints; ``logprobs_content``
    holds the JSON text of OpenAI's ``choice.logprobs.content`` (``[{"logprob": ...}]``).
    """

    name: str
    convention: str
    prompt_token_ids: str
    completion_token_ids: str
    logprobs_content: str

    def ids_sql(self, key: str, attributes: str = "attributes") -> str:
        """DuckDB expression: the int array under attribute ``key`` (NULL when absent or not ints)."""
        return f"TRY_CAST(json_extract({attributes}, {attribute_path(key)}) AS INTEGER[])"

    def logprobs_sql(self, attributes: str = "attributes") -> str:
        """DuckDB expression: the log-prob of each token in ``logprobs_content`` (NULL when absent)."""
        return (f"list_transform(TRY(from_json(json_extract_string({attributes}, {attribute_path(self.logprobs_content)}), "
                f"'[{{\"logprob\": \"FLOAT\"}}]')), lambda item: item.logprob)")


TOKEN_LAYOUTS: tuple[TokenLayout, ...] = (
    TokenLayout(
        name="agentlightning", convention="agentlightning 0.3 (its patched agentops)",
        prompt_token_ids=A.AGENTLIGHTNING_PROMPT_TOKEN_IDS, completion_token_ids=A.AGENTLIGHTNING_RESPONSE_TOKEN_IDS,
        logprobs_content=A.AGENTLIGHTNING_LOGPROBS_CONTENT,
    ),
)


def tokens_sql(kind: str, column: str, attributes: str = "attributes") -> str:
    """DuckDB expression: a span's tracerl token ``column``, else the first TOKEN_LAYOUTS entry that has them.

    ``kind``: ``prompt``, ``completion`` (int arrays) or ``logprobs`` (float array).
    """
    if kind == "logprobs":
        found = [layout.logprobs_sql(attributes) for layout in TOKEN_LAYOUTS]
    else:
        found = [layout.ids_sql(getattr(layout, f"{kind}_token_ids"), attributes) for layout in TOKEN_LAYOUTS]
    return f"coalesce({', '.join([column, *found])})"


@dataclass(frozen=True)
class EpisodeLayout:
    """A convention's own episode ids: the span's attribute ``rollout``/``attempt``, else its resource's.

    The episode id is ``ROLLOUT:ATTEMPT`` (one attempt of a rollout is one episode; a retried
    rollout has several); ``rollout_id``/``attempt_id`` stay visible on the ``episodes`` view
    and key rewards files.
    """

    name: str
    convention: str
    rollout: str
    attempt: str


EPISODE_LAYOUTS: tuple[EpisodeLayout, ...] = (
    EpisodeLayout(
        name="agentlightning", convention="agentlightning 0.3 (ids on the resource when its store speaks OTLP)",
        rollout=A.AGENTLIGHTNING_ROLLOUT_ID, attempt=A.AGENTLIGHTNING_ATTEMPT_ID,
    ),
)


@dataclass(frozen=True)
class RewardLayout:
    """Where a convention records a reward on a span (of any name, or only ``span_name``).

    ``form``: ``dimensions``: ``{key}.{n}.name`` / ``{key}.{n}.value``, one reward per
    dimension ``n``, dimension 0 the primary one (the others count only when
    ``--reward-weight`` names them); ``output``: ``key`` holds JSON text
    ``{"type": "reward", "value": v}``; ``number``: ``key`` holds the value.
    """

    name: str
    convention: str
    form: str
    key: str
    span_name: str | None = None


REWARD_LAYOUTS: tuple[RewardLayout, ...] = (
    RewardLayout("agentlightning", "agentlightning 0.3 emit_reward", "dimensions", A.AGENTLIGHTNING_REWARD),
    RewardLayout("agentlightning", "agentlightning's deprecated @reward (agentops)", "output", A.AGENTOPS_TASK_OUTPUT),
    RewardLayout("agentlightning", "agentlightning's deprecated @reward (older agentops)", "output", A.AGENTOPS_ENTITY_OUTPUT),
    RewardLayout("agentlightning", "agentlightning 0.2 annotation", "number", A.AGENTLIGHTNING_LEGACY_REWARD,
                 span_name=A.AGENTLIGHTNING_ANNOTATION_SPAN_NAME),
)


@dataclass(frozen=True)
class AgentNameSource:
    """An attribute naming the agent a span belongs to (only on spans whose agentops kind is ``agentops_kind``, if set)."""

    convention: str
    key: str
    agentops_kind: str | None = None


# after tracerl's own (tracerl.agent.name, gen_ai.agent.name), in agentlightning's adapter's order
AGENT_NAME_SOURCES: tuple[AgentNameSource, ...] = (
    AgentNameSource("OpenAI Agents SDK via agentops", A.OPENAI_AGENTS_AGENT_NAME),
    AgentNameSource("agentops @agent", A.AGENTOPS_OPERATION_NAME, agentops_kind=A.AGENTOPS_AGENT_KIND),
    AgentNameSource("AutoGen via agentops", A.AUTOGEN_RECIPIENT_AGENT_TYPE),
    AgentNameSource("LangChain via agentops", A.LANGCHAIN_CHAIN_TYPE),
    AgentNameSource("agent-framework", A.AGENT_FRAMEWORK_EXECUTOR_ID),
)
