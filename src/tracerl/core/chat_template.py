"""Prompt token ids of chat messages, made the way an OpenAI-compatible server makes them.

The tokenizer's own chat template renders the messages as text (``tokenize=False``) and
that text is encoded once without extra special tokens, as vLLM does: the template holds
the special tokens already. The built-in server builds its prompts with it, and the
pipeline's ``--retokenize`` rebuilds the prompts of calls captured without token ids with
it, so both agree token for token on the same messages.
"""

from __future__ import annotations

from typing import Any


def template_prompt_ids(
    tokenizer: Any, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]] | None = None,
    add_generation_prompt: bool = True, continue_final_message: bool = False,
) -> list[int]:
    """Token ids of ``tokenizer``'s chat template applied to ``messages`` (and ``tools``).

    The template's own errors (jinja's ``TemplateError`` and friends) propagate.
    """
    text = tokenizer.apply_chat_template(
        messages, tools=tools, add_generation_prompt=add_generation_prompt,
        continue_final_message=continue_final_message, tokenize=False,
    )
    return tokenizer(text, add_special_tokens=False)["input_ids"]


PROBE_TOOL = {"type": "function", "function": {"name": "tracerl_probe_tool", "description": "probe", "parameters": {"type": "object", "properties": {}}}}


def renders_tools(tokenizer: Any) -> bool:
    """Whether the chat template puts the ``tools`` a request sends into the prompt at all.

    Many small models' templates (SmolLM2's among them) have no place for tools: an agent's
    tool definitions then never reach the model, which cannot learn to call what it never
    sees. Asked by rendering one conversation with and without a probe tool.
    """
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    try:
        with_tool = tokenizer.apply_chat_template(messages, tools=[PROBE_TOOL], add_generation_prompt=True, tokenize=False)
    except Exception:  # a template that refuses tools does not render them either
        return False
    return PROBE_TOOL["function"]["name"] in with_tool


# ChatML (<|im_start|>role ... <|im_end|>, SmolLM2's and Qwen's turns) with the request's tools in
# the system turn and calls written as hermes <tool_call> blocks, which vLLM's `--tool-call-parser
# hermes` and tracerl's built-in server parse; tool results come back as <tool_response> in a user turn.
HERMES_TOOLS_TEMPLATE = (
    "{% set rest = messages %}"
    "{% if messages and messages[0]['role'] == 'system' %}{% set system = messages[0]['content'] %}{% set rest = messages[1:] %}"
    "{% else %}{% set system = 'You are a helpful AI assistant.' %}{% endif %}"
    "<|im_start|>system\n{{ system }}"
    "{% if tools %}{% set first = tools[0]['function'] if tools[0]['function'] is defined else tools[0] %}{{ '\\n\\n' }}You have these tools:\n<tools>\n"
    "{% for tool in tools %}{% set f = tool['function'] if tool['function'] is defined else tool %}"
    "{\"name\": {{ f['name'] | tojson }}, \"description\": {{ (f['description'] or '') | tojson }}, \"parameters\": {{ (f['parameters'] or {}) | tojson }}}\n{% endfor %}"
    "</tools>\nTo use a tool, reply with a call in this form, and nothing else:\n<tool_call>\n"
    "{\"name\": \"{{ first['name'] }}\", \"arguments\": {{ '{' }}"
    "{% for arg in (first['parameters']['properties'] if first['parameters'] is defined and first['parameters']['properties'] is defined else {}) %}"
    "{{ ', ' if not loop.first else '' }}\"{{ arg }}\": ...{% endfor %}}}\n</tool_call>"
    "{% endif %}<|im_end|>\n"
    "{% for m in rest %}"
    "{% if m['role'] == 'tool' %}<|im_start|>user\n<tool_response>\n{{ m['content'] }}\n</tool_response><|im_end|>\n"
    "{% elif m['role'] == 'assistant' %}<|im_start|>assistant\n{{ m['content'] if m['content'] is string else '' }}"
    "{% for call in (m['tool_calls'] or []) %}"
    "{% set f = call['function'] if call['function'] is defined else call %}"
    "{{ '\\n' if (m['content'] is string and m['content']) or not loop.first else '' }}<tool_call>\n"
    "{\"name\": \"{{ f['name'] }}\", \"arguments\": {{ f['arguments'] if f['arguments'] is string else f['arguments'] | tojson }}}\n</tool_call>"
    "{% endfor %}<|im_end|>\n"
    "{% else %}<|im_start|>{{ m['role'] }}\n{{ m['content'] if m['content'] is string else '' }}<|im_end|>\n"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
