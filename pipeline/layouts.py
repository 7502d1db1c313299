"""Where each tracing convention keeps an LLM call's chat messages, declared as data.

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

from tracerl.schemas import attributes as A

NO_CONTENT = "none"  # content_layout of a call whose messages were not recorded


@dataclass(frozen=True)
class ContentLayout:
    """How one convention records the input and output messages of an LLM call.

    ``flattened=False``: ``input``/``output`` are attributes holding the messages as JSON
    and ``tool_call_arguments`` is a JSONPath into the output JSON.
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
)


def content_layout(name: str) -> ContentLayout:
    """The layout called ``name`` (a ``content_layout`` value other than ``none``)."""
    for layout in CONTENT_LAYOUTS:
        if layout.name == name:
            return layout
    raise KeyError(f"no content layout {name!r}: known are {', '.join(l.name for l in CONTENT_LAYOUTS)}")
