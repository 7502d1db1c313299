"""Hermes tool-call text <-> OpenAI tool_calls, as the server parses and renders them."""

from __future__ import annotations

import json

from tracerl.trainer.serving import tool_parser


def test_text_without_a_call_is_not_a_tool_reply():
    assert tool_parser.parse("The answer is 7.") is None


def test_calls_after_some_text_keep_the_text_as_content():
    text = 'Let me add. <tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call>\n<tool_call>{"name": "mul", "arguments": "{\\"b\\": 2}"}</tool_call>'
    parsed = tool_parser.parse(text)
    assert parsed.content == "Let me add."
    assert [c["function"]["name"] for c in parsed.tool_calls] == ["add", "mul"]
    assert json.loads(parsed.tool_calls[0]["function"]["arguments"]) == {"a": 1}
    assert json.loads(parsed.tool_calls[1]["function"]["arguments"]) == {"b": 2}
    assert len({c["id"] for c in parsed.tool_calls}) == 2


def test_a_call_cut_off_by_eos_before_its_closing_tag_still_parses():
    parsed = tool_parser.parse('<tool_call>{"name": "add", "arguments": {}}')
    assert parsed.content is None
    assert parsed.tool_calls[0]["function"] == {"name": "add", "arguments": "{}"}


def test_malformed_calls_stay_text():
    assert tool_parser.parse("<tool_call>{not json}</tool_call>") is None
    assert tool_parser.parse('<tool_call>{"arguments": {}}</tool_call>') is None  # no name
    assert tool_parser.parse("<tool_call>[1, 2]</tool_call>") is None


def test_render_is_the_inverse_of_parse():
    calls = tool_parser.parse('<tool_call>{"name": "add", "arguments": {"a": 3, "b": 4}}</tool_call>').tool_calls
    assert tool_parser.render(calls) == '<tool_call>{"name": "add", "arguments": {"a": 3, "b": 4}}</tool_call>'


def test_streaming_holds_back_what_may_open_a_call():
    assert tool_parser.held_back("hello") == 0
    assert tool_parser.held_back("hello <tool") == len("<tool")
    assert tool_parser.held_back("hello <tool_call>{") == len("<tool_call>{")
    assert tool_parser.held_back("a < b") == 0
