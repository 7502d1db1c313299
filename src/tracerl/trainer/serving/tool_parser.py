"""Hermes-style tool calls: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``.

The same convention as vLLM's ``hermes`` tool parser, so an agent sees the same
OpenAI ``tool_calls`` whether the built-in server or vLLM serves it. ``render`` is the
inverse, used to show a model its own earlier calls when its chat template has no
notion of ``tool_calls``: the prompt then holds exactly the text the model generated.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_CALL = re.compile(re.escape(OPEN) + r"\s*(.*?)\s*(?:" + re.escape(CLOSE) + r"|$)", re.DOTALL)


@dataclass(frozen=True)
class ParsedTools:
    content: str | None  # text before the first call, None if empty
    tool_calls: list[dict]  # OpenAI shape: {"id", "type": "function", "function": {"name", "arguments"}}


def parse(text: str) -> ParsedTools | None:
    """The tool calls in ``text``, or None when it holds no well-formed call."""
    start = text.find(OPEN)
    if start < 0:
        return None
    calls = []
    for match in _CALL.finditer(text, start):
        try:
            call = json.loads(match.group(1))
        except json.JSONDecodeError:
            return None
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            return None
        arguments = call.get("arguments", {})
        calls.append(
            {
                "id": f"call_{uuid.uuid4().hex[:24]}",
                "type": "function",
                "function": {
                    "name": call["name"],
                    "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
                },
            }
        )
    content = text[:start].strip()
    return ParsedTools(content or None, calls)


def render(tool_calls: list[dict]) -> str:
    """OpenAI ``tool_calls`` of an assistant message, as the text a hermes model emits."""
    parts = []
    for call in tool_calls:
        function = call.get("function") or {}
        arguments = function.get("arguments", "{}")
        try:
            arguments = json.loads(arguments) if isinstance(arguments, str) else arguments
        except json.JSONDecodeError:
            pass  # keep the string: the model sees what the client sent
        parts.append(OPEN + json.dumps({"name": function.get("name"), "arguments": arguments}) + CLOSE)
    return "".join(parts)


def held_back(text: str) -> int:
    """How many trailing chars of streamed ``text`` to hold back because they may open a call."""
    start = text.find(OPEN)
    if start >= 0:
        return len(text) - start
    for k in range(min(len(OPEN) - 1, len(text)), 0, -1):
        if text.endswith(OPEN[:k]):
            return k
    return 0
