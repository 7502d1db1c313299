"""Token ids for calls captured without them, rebuilt from their messages (opt-in: ``--retokenize TOKENIZER``).

Instrumentations other than tracerl's (the official OpenAI one, OpenLLMetry, OpenInference)
record a call's messages, not the token ids the server sampled. Such calls stay out of
training by default: re-encoding text is not what the policy saw. A chat template
renders messages the way the server did only if the messages are complete (system
prompt, tool definitions, the exact text of earlier tool calls), and text re-encoded
can split into other tokens than the ones sampled (the merges of a byte-level BPE,
whitespace the server stripped). ``benchmarks/retokenize.py`` measures how often that
happens on the demo agent.

With ``--retokenize`` the prompt is the policy tokenizer's chat template over the input
messages and the tool definitions the call sent (``gen_ai.tool.definitions``, given back to
the template in OpenAI's shape, as the server got them;
:func:`tracerl.core.chat_template.template_prompt_ids`, the server's own way) and
the response is the encoded text of the output messages followed by the tokenizer's
end-of-sequence token (a server that stops on it returns it as the last sampled token),
unless the output message says it was cut at the token limit (``finish_reason: length``).
Every such row says ``token_source = 'retokenized'`` and has no log-probs; the trainer
treats it like any row sampled without log-probs.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from tracerl.core.chat_template import template_prompt_ids
from tracerl.pipeline.messages import chat_messages, request_messages
from tracerl.pipeline.source import PipelineInputError
from tracerl.schemas import attributes as A


def _tools(attributes: str | None) -> list[dict[str, Any]] | None:
    """The call's tool definitions (GenAI's flat ``gen_ai.tool.definitions``) in OpenAI's request shape, or None."""
    try:
        value = json.loads(attributes or "{}").get(A.GEN_AI_TOOL_DEFINITIONS)
        flat = json.loads(value) if isinstance(value, str) else value
    except (json.JSONDecodeError, AttributeError):
        return None
    if not isinstance(flat, list) or not flat:
        return None
    return [{"type": t.get("type", "function"), "function": {k: v for k, v in t.items() if k != "type"}} if isinstance(t, dict) else t for t in flat]


def _finish_reason(output_messages: str | None) -> str | None:
    """The GenAI ``finish_reason`` of the last output message, if it says one."""
    try:
        messages = json.loads(output_messages or "[]")
    except json.JSONDecodeError:
        return None
    last = messages[-1] if isinstance(messages, list) and messages else None
    return last.get(A.GEN_AI_FINISH_REASON) if isinstance(last, dict) else None


class Retokenizer:
    """The policy's tokenizer, and the token ids it gives a call's input and output messages."""

    def __init__(self, tokenizer: str) -> None:
        try:
            from transformers import AutoTokenizer
        except ImportError:
            raise PipelineInputError(
                "--retokenize needs transformers: pip install 'tracerl[train]' (or transformers alone)"
            ) from None
        if os.sep in tokenizer and not os.path.isdir(tokenizer):
            raise PipelineInputError(f"--retokenize {tokenizer}: no such folder; give the policy's model folder (the checkpoint the server loads)")
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(tokenizer)
        except (OSError, ValueError) as exc:
            raise PipelineInputError(
                f"--retokenize {tokenizer}: no tokenizer could be loaded from there ({exc}); give the policy's "
                "model folder (the checkpoint the server loads)"
            ) from None
        if not getattr(self.tokenizer, "chat_template", None):
            raise PipelineInputError(f"--retokenize {tokenizer}: the tokenizer has no chat template, so prompts cannot be rebuilt")

    def ids(
        self, input_messages: str | None, output_messages: str | None, tools: list[dict[str, Any]] | None = None,
    ) -> tuple[list[int], list[int]] | None:
        """(prompt ids, response ids) of a call's message JSON (and tools); None when either side is missing or empty."""
        prompt, output = request_messages(input_messages), chat_messages(output_messages)
        text = "".join(m["content"] for m in output if m["role"] == "assistant") if output else ""
        if not prompt or not text:
            return None
        response = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        if self.tokenizer.eos_token_id is not None and _finish_reason(output_messages) != "length":
            response = [*response, self.tokenizer.eos_token_id]
        return template_prompt_ids(self.tokenizer, prompt, tools=tools), response

    def fill(self, part: pa.Table) -> pa.Table:
        """``part`` with token ids rebuilt where its span had none, and the ``token_source`` of every row.

        A call whose messages cannot be rebuilt keeps its missing ids (the writer drops it as ``no_token_ids``).
        """
        missing = pc.is_null(part.column("response_token_ids")).to_numpy(zero_copy_only=False)
        source = [A.TOKEN_SOURCE_SERVED] * len(part)
        if not missing.any():
            return part.append_column("token_source", pa.array(source, pa.string()))
        prompts: list[Any] = part.column("prompt_token_ids").to_pylist()
        responses: list[Any] = part.column("response_token_ids").to_pylist()
        inputs, outputs = part.column("input_messages"), part.column("output_messages")
        attributes = part.column("attributes") if "attributes" in part.column_names else pa.nulls(len(part), pa.string())
        for i in missing.nonzero()[0].tolist():
            rebuilt = self.ids(inputs[i].as_py(), outputs[i].as_py(), _tools(attributes[i].as_py()))
            if rebuilt:
                prompts[i], responses[i] = rebuilt
                source[i] = A.TOKEN_SOURCE_RETOKENIZED
        for name, values in (("prompt_token_ids", prompts), ("response_token_ids", responses)):
            column = pa.array(values, part.schema.field(name).type)
            part = part.set_column(part.schema.get_field_index(name), name, column)
        return part.append_column("token_source", pa.array(source, pa.string()))
