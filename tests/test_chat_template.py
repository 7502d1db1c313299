"""Chat templates and tools: whether a template shows the model the tools a request sends, and the ChatML
template tracerl gives a model whose own template drops them (``tracerl model from-gguf --chat-template hermes``)."""

from __future__ import annotations

import json

import pytest
from transformers import AutoTokenizer

from tracerl.core.chat_template import HERMES_TOOLS_TEMPLATE, renders_tools
from tracerl.trainer.serving import tool_parser

CALCULATOR = {"type": "function", "function": {"name": "calculator", "description": "Evaluate an expression.",
              "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}}, "strict": False}}
CALL = {"id": "c0", "type": "function", "function": {"name": "calculator", "arguments": json.dumps({"expression": "6 * 7"})}}


@pytest.fixture
def tokenizer(tiny_checkpoint):
    return AutoTokenizer.from_pretrained(tiny_checkpoint)


def test_a_template_without_a_place_for_tools_is_told_apart(tokenizer):
    assert not renders_tools(tokenizer)  # the tiny model's: its warm start teaches it the calls instead
    tokenizer.chat_template = "{{ raise_exception('no tools here') if tools else '' }}{% for m in messages %}{{ m['content'] }}{% endfor %}"
    assert not renders_tools(tokenizer)  # one that refuses them
    tokenizer.chat_template = HERMES_TOOLS_TEMPLATE
    assert renders_tools(tokenizer)


def test_the_hermes_template_shows_each_tool_and_writes_calls_the_tool_parser_reads_back(tokenizer):
    messages = [
        {"role": "system", "content": "Use the calculator."},
        {"role": "user", "content": "What is 6 times 7?"},
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "content": "42", "tool_call_id": "c0"},
    ]
    text = tokenizer.apply_chat_template(messages, tools=[CALCULATOR], chat_template=HERMES_TOOLS_TEMPLATE, tokenize=False, add_generation_prompt=True)
    system, user, assistant, tool, generation = text.split("<|im_start|>")[1:]
    assert system.startswith("system\nUse the calculator.\n\nYou have these tools:\n<tools>\n")
    # name, description and parameters only: what a server adds to a tool (strict, ...) does not change the prompt
    assert '{"name": "calculator", "description": "Evaluate an expression.", "parameters": {"type": "object", ' in system
    assert "strict" not in system and '"arguments": {"expression": ...}' in system
    assert user == "user\nWhat is 6 times 7?<|im_end|>\n"
    parsed = tool_parser.parse(assistant.removeprefix("assistant\n").removesuffix("<|im_end|>\n"))
    assert [c["function"] for c in parsed.tool_calls] == [CALL["function"]]
    assert tool == "user\n<tool_response>\n42\n</tool_response><|im_end|>\n" and generation == "assistant\n"


def test_the_flat_tool_definitions_spans_record_render_like_the_request_did(tokenizer):
    """--retokenize gives the template a call's recorded tools (GenAI's flat form) back in the request's shape."""
    from tracerl.pipeline.retokenize import _tools

    flat = json.dumps([{"type": "function", **CALCULATOR["function"]}])
    render = lambda tools: tokenizer.apply_chat_template([{"role": "user", "content": "q"}], tools=tools,  # noqa: E731
                                                         chat_template=HERMES_TOOLS_TEMPLATE, tokenize=False)
    assert render(_tools(json.dumps({"gen_ai.tool.definitions": flat}))) == render([CALCULATOR])
    assert _tools(json.dumps({})) is None and _tools(None) is None
