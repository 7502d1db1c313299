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
the template in OpenAI's shape), tool-call arguments parsed into mappings: the server's own way
(:func:`tracerl.core.chat_template.template_prompt_ids`; vLLM and ``tracerl serve`` parse them
before the template sees them). The response is the same template's rendering of the output as
one more assistant message, its tool calls as ``tool_calls``, less the prompt's rendering in
front, up to the end-of-sequence token that closes the turn: for a tool call that is the markup
the template teaches the model and the server's tool parser reads (hermes' ``<tool_call>``
block), not the text the call was recorded as. The end-of-sequence token stays (a server that
stops on it returns it as the last sampled token) unless the output message says it was cut at
the token limit (``finish_reason: length``). Where the template cannot give the response that
way (the prompt's rendering is not the start of the whole one, no end-of-sequence token follows
it, the output calls tools and the template has no ``tool_calls``, or the template rejects the
conversation), the response is the output's text encoded alone, tool calls as JSON text, with the
end-of-sequence token on the same terms.
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


def _template_message(message: dict[str, Any]) -> dict[str, Any]:
    """``message`` as a server gives it to the chat template: tool-call arguments parsed into a mapping.

    HF templates write arguments with ``tojson``; a JSON string there would come out quoted and
    escaped. Arguments that are not JSON stay the string they are.
    """
    if not message.get("tool_calls"):
        return message
    calls = []
    for call in message["tool_calls"]:
        function = dict(call.get("function") or {})
        try:
            function["arguments"] = json.loads(function.get("arguments") or "{}")
        except (json.JSONDecodeError, TypeError):
            pass
        calls.append({**call, "function": function})
    return {**message, "tool_calls": calls}


def _answer(output_messages: str | None) -> dict[str, Any] | None:
    """The call's output as one assistant message for the chat template (text and tool calls); None when it holds neither."""
    said = [m for m in request_messages(output_messages) if m["role"] == "assistant"]
    content = "".join(m["content"] for m in said)
    calls = [call for m in said for call in m.get("tool_calls") or []]
    if not content and not calls:
        return None
    return _template_message({"role": "assistant", "content": content, **({"tool_calls": calls} if calls else {})})


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
        # tracerl serve's test too: a template without them drops a message's tool calls
        self._knows_tool_calls = "tool_calls" in str(self.tokenizer.chat_template)

    def ids(
        self, input_messages: str | None, output_messages: str | None, tools: list[dict[str, Any]] | None = None,
    ) -> tuple[list[int], list[int]] | None:
        """(prompt ids, response ids) of a call's message JSON (and tools); None when either side is missing or empty."""
        rebuilt = self._rebuilt(input_messages, output_messages, tools)
        return rebuilt[:2] if rebuilt else None

    def _rebuilt(
        self, input_messages: str | None, output_messages: str | None, tools: list[dict[str, Any]] | None,
    ) -> tuple[list[int], list[int], bool] | None:
        """:meth:`ids`, and whether the response is the output's text encoded alone (the template could not render it)."""
        prompt, answer = [_template_message(m) for m in request_messages(input_messages)], _answer(output_messages)
        if not prompt or answer is None:
            return None
        prompt_ids = template_prompt_ids(self.tokenizer, prompt, tools=tools)
        stopped = _finish_reason(output_messages) != "length"
        response = self._rendered_response(prompt, prompt_ids, answer, tools, stopped)
        if response is None:
            return prompt_ids, self._text_response(output_messages, stopped), True
        return prompt_ids, response, False

    def _rendered_response(
        self, prompt: list[dict[str, Any]], prompt_ids: list[int], answer: dict[str, Any],
        tools: list[dict[str, Any]] | None, stopped: bool,
    ) -> list[int] | None:
        """The chat template's tokens of ``answer`` after ``prompt``, to the end of its turn; None where the template cannot tell."""
        from jinja2 import TemplateError  # transformers' chat templates need jinja2; the pipeline alone does not

        eos = self.tokenizer.eos_token_id
        if eos is None or (answer.get("tool_calls") and not self._knows_tool_calls):
            return None
        try:
            whole = template_prompt_ids(self.tokenizer, [*prompt, answer], tools=tools, add_generation_prompt=False)
        except TemplateError:
            return None
        turn = whole[len(prompt_ids):]
        if whole[:len(prompt_ids)] != prompt_ids or eos not in turn:
            return None
        end = turn.index(eos)  # a sampled response holds no eos before its last token
        return turn[: end + 1] if stopped else turn[:end]

    def _text_response(self, output_messages: str | None, stopped: bool) -> list[int]:
        """The output's text encoded alone (tool calls as JSON text), then the end-of-sequence token if it stopped."""
        text = "".join(m["content"] for m in chat_messages(output_messages) if m["role"] == "assistant")
        response = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        if self.tokenizer.eos_token_id is not None and stopped:
            response = [*response, self.tokenizer.eos_token_id]
        return response

    def fill(self, part: pa.Table) -> tuple[pa.Table, int]:
        """``part`` with token ids rebuilt where its span had none, and the ``token_source`` of every row; and how
        many of the rebuilt responses are the output's text encoded alone, the likeliest to differ from what was sampled.

        A call whose messages cannot be rebuilt keeps its missing ids (the writer drops it as ``no_token_ids``).
        """
        missing = pc.is_null(part.column("response_token_ids")).to_numpy(zero_copy_only=False)
        source = [A.TOKEN_SOURCE_SERVED] * len(part)
        if not missing.any():
            return part.append_column("token_source", pa.array(source, pa.string())), 0
        prompts: list[Any] = part.column("prompt_token_ids").to_pylist()
        responses: list[Any] = part.column("response_token_ids").to_pylist()
        inputs, outputs = part.column("input_messages"), part.column("output_messages")
        attributes = part.column("attributes") if "attributes" in part.column_names else pa.nulls(len(part), pa.string())
        from_text = 0
        for i in missing.nonzero()[0].tolist():
            rebuilt = self._rebuilt(inputs[i].as_py(), outputs[i].as_py(), _tools(attributes[i].as_py()))
            if rebuilt:
                prompts[i], responses[i], as_text = rebuilt
                source[i] = A.TOKEN_SOURCE_RETOKENIZED
                from_text += as_text
        for name, values in (("prompt_token_ids", prompts), ("response_token_ids", responses)):
            column = pa.array(values, part.schema.field(name).type)
            part = part.set_column(part.schema.get_field_index(name), name, column)
        return part.append_column("token_source", pa.array(source, pa.string())), from_text
