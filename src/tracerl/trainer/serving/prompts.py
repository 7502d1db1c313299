"""Turn OpenAI requests into prompt token ids, exactly as the policy sees them.

Chat prompts go through the tokenizer's own chat template
(:func:`tracerl.core.chat_template.template_prompt_ids`, as vLLM does); completions prompts are text
(encoded with the tokenizer's usual special tokens) or token ids taken verbatim.
"""

from __future__ import annotations

import json

from tracerl.core.chat_template import template_prompt_ids
from tracerl.trainer.serving import tool_parser
from tracerl.trainer.serving.protocol import ChatCompletionRequest, CompletionRequest, RequestError


def chat_prompt_ids(tokenizer, request: ChatCompletionRequest) -> list[int]:
    """Token ids of the chat template applied to the messages (and tools), ready to generate."""
    knows_tool_calls = "tool_calls" in (tokenizer.chat_template or "")
    messages = []
    for message in request.messages:
        entry = {"role": "system" if message.role == "developer" else message.role, "content": message.text() or ""}
        if message.tool_calls:
            calls = [call.model_dump(exclude_none=True) for call in message.tool_calls]
            if knows_tool_calls:
                entry["tool_calls"] = [_with_parsed_arguments(call) for call in calls]
            else:  # show the model its own calls as the text it generated
                entry["content"] += tool_parser.render(calls)
        for key in ("name", "tool_call_id"):
            if getattr(message, key) is not None:
                entry[key] = getattr(message, key)
        messages.append(entry)
    tools = [tool.model_dump(exclude_none=True) for tool in request.tools] if request.tools else None
    try:
        return template_prompt_ids(
            tokenizer, messages, tools=tools,
            add_generation_prompt=request.add_generation_prompt and not request.continue_final_message,
            continue_final_message=request.continue_final_message,
        )
    except Exception as exc:  # jinja raises TemplateError and friends for messages it rejects
        raise RequestError(f"the chat template rejected the messages: {exc}", param="messages") from None


def completion_prompt_ids(tokenizer, request: CompletionRequest, vocab_size: int) -> list[list[int]]:
    """One token-id list per prompt of a completions request."""
    prompt = request.prompt
    if isinstance(prompt, str):
        prompts: list = [prompt]
    elif all(isinstance(p, int) for p in prompt):
        prompts = [prompt]
    else:
        prompts = list(prompt)
    out = []
    for i, p in enumerate(prompts):
        if isinstance(p, str):
            ids = tokenizer(p)["input_ids"]
            if not ids:
                raise RequestError("prompt is empty" if len(prompts) == 1 else f"prompt[{i}] is empty", param="prompt")
        else:
            bad = [t for t in p if not 0 <= t < vocab_size]
            if bad:
                raise RequestError(f"prompt holds token ids outside the vocabulary [0, {vocab_size}): {bad[:5]}", param="prompt")
            ids = list(p)
        out.append(ids)
    return out


def _with_parsed_arguments(call: dict) -> dict:
    """HF chat templates expect tool-call arguments as a mapping, OpenAI sends a JSON string."""
    function = dict(call.get("function", {}))
    if isinstance(function.get("arguments"), str):
        try:
            function["arguments"] = json.loads(function["arguments"])
        except json.JSONDecodeError:
            pass
    return {**call, "function": function}
