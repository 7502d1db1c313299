"""Chat messages of an LLM call, from whichever layout the instrumentation used.

Three layouts exist in the wild: the current GenAI convention keeps the messages as
one JSON attribute (``gen_ai.input.messages``); OpenLLMetry and older GenAI
conventions flatten them into ``gen_ai.prompt.{i}.role``, ``gen_ai.completion.{i}
.tool_calls.{j}.arguments``...; OpenInference flattens into ``llm.input_messages.{i}
.message.role``. The dataset always stores a JSON list of ``{role, content,
tool_calls?}`` so that consumers read one shape.
"""

from __future__ import annotations

import json
import re
from typing import Any

# prefix of the flattened input and output messages, per layout
_FLAT_LAYOUTS = {
    "gen_ai": ("gen_ai.prompt.", "gen_ai.completion."),
    "openinference": ("llm.input_messages.", "llm.output_messages."),
}
_INDEX = re.compile(r"^(\d+)\.(.+)$")


def _nest(pairs: dict[str, Any]) -> Any:
    """Turn ``{"0.role": "user", "0.tool_calls.1.name": "f"}`` into nested lists and dicts."""
    tree: dict[str, Any] = {}
    for path, value in pairs.items():
        node = tree
        parts = path.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):  # a scalar and a sub-path share a key: keep the scalar
                break
        else:
            node[parts[-1]] = value
    return _lists(tree)


def _lists(node: Any) -> Any:
    if not isinstance(node, dict):
        return node
    converted = {k: _lists(v) for k, v in node.items()}
    if converted and all(k.isdigit() for k in converted):
        return [converted[k] for k in sorted(converted, key=int)]
    return converted


def _openinference_message(node: dict[str, Any]) -> dict[str, Any]:
    message = dict(node.get("message", node))
    calls = message.pop("tool_calls", None)
    if isinstance(calls, list):
        message["tool_calls"] = [
            {
                "id": call.get("tool_call", call).get("id"),
                "name": call.get("tool_call", call).get("function", {}).get("name"),
                "arguments": call.get("tool_call", call).get("function", {}).get("arguments"),
            }
            for call in calls
            if isinstance(call, dict)
        ]
    return message


def flat_messages(attributes: dict[str, Any]) -> tuple[list | None, list | None]:
    """Input and output messages of a flattened layout, or ``(None, None)`` if there are none."""
    for layout, prefixes in _FLAT_LAYOUTS.items():
        found = []
        for prefix in prefixes:
            pairs = {}
            for key, value in attributes.items():
                if key.startswith(prefix) and _INDEX.match(key[len(prefix):]):
                    pairs[key[len(prefix):]] = value
            nested = _nest(pairs) if pairs else None
            if isinstance(nested, dict):  # indices were not all numeric: not a message list
                nested = list(nested.values())
            if nested is not None and layout == "openinference":
                nested = [_openinference_message(m) for m in nested if isinstance(m, dict)]
            found.append(nested)
        if any(part is not None for part in found):
            return found[0], found[1]
    return None, None


def messages_json(attributes_json: str | None) -> tuple[str | None, str | None]:
    """``(input, output)`` messages as JSON text from a span's attribute JSON (flattened layouts)."""
    if not attributes_json:
        return None, None
    inputs, outputs = flat_messages(json.loads(attributes_json))
    dump = lambda value: None if value is None else json.dumps(value, ensure_ascii=False)  # noqa: E731
    return dump(inputs), dump(outputs)


def _text(parts: Any) -> str:
    if isinstance(parts, str):
        return parts
    if isinstance(parts, list):
        return "".join(_text(p.get("content", "") if isinstance(p, dict) else p) for p in parts
                       if not isinstance(p, dict) or p.get("type", "text") == "text")
    return "" if parts is None else str(parts)


def chat_messages(messages_json_text: str | None) -> list[dict[str, str]]:
    """``[{role, content}]`` of a dataset's message JSON, whatever layout it came from.

    GenAI JSON keeps text in ``parts``; flattened layouts in ``content``. Tool calls are
    rendered as JSON text so that a chat template sees what the model produced.
    """
    if not messages_json_text:
        return []
    out = []
    for message in json.loads(messages_json_text):
        if not isinstance(message, dict):
            continue
        content = _text(message["parts"]) if "parts" in message else _text(message.get("content"))
        calls = [p for p in message.get("parts", []) if isinstance(p, dict) and p.get("type") == "tool_call"]
        calls += message.get("tool_calls") or []
        if calls:
            content += "".join(
                json.dumps({"name": c.get("name"), "arguments": c.get("arguments")}, ensure_ascii=False) for c in calls
            )
        out.append({"role": str(message.get("role", "user")), "content": content})
    return out
