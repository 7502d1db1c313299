"""Chat messages of an LLM call, from whichever content layout the instrumentation used.

The layouts are declared in :mod:`tracerl.pipeline.layouts`. A JSON layout's messages
go into the dataset as recorded; a flattened layout's attributes (``gen_ai.prompt.0.role``,
``llm.output_messages.0.message.tool_calls.1.tool_call.function.arguments``...) are
nested back into a JSON list of ``{role, content, tool_calls?: [{id, name, arguments}]}``,
so that consumers read one shape per layout family (:func:`chat_messages` reads both).
"""

from __future__ import annotations

import json
import re
from typing import Any

from tracerl.pipeline.layouts import ContentLayout
from tracerl.schemas import attributes as A

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


def _at(node: Any, path: str) -> Any:
    """``node["a"]["b"]`` for ``path`` "a.b" (None where a level is missing)."""
    for part in path.split(".") if path else ():
        node = node.get(part) if isinstance(node, dict) else None
    return node


def _message(node: dict[str, Any], layout: ContentLayout) -> dict[str, Any]:
    """One nested message in the dataset's shape: the layout's message level removed, tool calls as {id, name, arguments}."""
    message = dict(_at(node, layout.message) or {}) if layout.message else dict(node)
    calls = message.pop(layout.tool_calls, None)
    if isinstance(calls, list):
        message["tool_calls"] = [
            {"id": _at(call, layout.tool_call_id), "name": _at(call, layout.tool_call_name),
             "arguments": _at(call, layout.tool_call_arguments)}
            for call in calls
            if isinstance(call, dict)
        ]
    return message


def flat_messages(attributes: dict[str, Any], layout: ContentLayout) -> tuple[list | None, list | None]:
    """Input and output messages of a flattened ``layout`` (``None`` for a side it does not record)."""
    found = []
    for prefix in (layout.input + ".", layout.output + "."):
        pairs = {}
        for key, value in attributes.items():
            if key.startswith(prefix) and _INDEX.match(key[len(prefix):]):
                pairs[key[len(prefix):]] = value
        nested = _nest(pairs) if pairs else None
        if isinstance(nested, dict):  # indices were not all numeric: not a message list
            nested = list(nested.values())
        found.append(None if nested is None else [_message(m, layout) for m in nested if isinstance(m, dict)])
    return found[0], found[1]


def messages_json(attributes_json: str | None, layout: ContentLayout) -> tuple[str | None, str | None]:
    """``(input, output)`` messages as JSON text from a span's attribute JSON in a flattened ``layout``."""
    if not attributes_json:
        return None, None
    inputs, outputs = flat_messages(json.loads(attributes_json), layout)
    dump = lambda value: None if value is None else json.dumps(value, ensure_ascii=False)  # noqa: E731
    return dump(inputs), dump(outputs)


def _text(parts: Any) -> str:
    """The text of a message's ``content`` or GenAI ``parts``: text parts, and a tool result's response."""
    if isinstance(parts, str):
        return parts
    if isinstance(parts, list):
        return "".join(_part_text(p) for p in parts)
    return "" if parts is None else str(parts)


def _part_text(part: Any) -> str:
    if not isinstance(part, dict):
        return _text(part)
    kind = part.get(A.GEN_AI_PART_TYPE, A.GEN_AI_TEXT_PART)
    if kind == A.GEN_AI_TEXT_PART:
        return _text(part.get("content", ""))
    if kind == A.GEN_AI_TOOL_CALL_RESPONSE_PART:
        response = part.get("response", "")
        return response if isinstance(response, str) else json.dumps(response, ensure_ascii=False)
    return ""


def request_messages(messages_json_text: str | None) -> list[dict[str, Any]]:
    """The messages as an OpenAI chat request carried them, which is what a server's chat template was given:
    an assistant's tool calls as ``tool_calls``, each tool result a ``tool`` message with its call's id.

    ``--retokenize`` renders prompts and responses from these; :func:`chat_messages` (tool calls as
    text) is for readers of conversations.
    """
    if not messages_json_text:
        return []
    out: list[dict[str, Any]] = []
    for message in json.loads(messages_json_text):
        if not isinstance(message, dict):
            continue
        role = str(message.get("role", "user"))
        parts = message.get(A.GEN_AI_MESSAGE_PARTS)
        if parts is None:  # a flattened layout: {role, content, tool_calls?: [{id, name, arguments}]}
            parts = [{A.GEN_AI_PART_TYPE: A.GEN_AI_TEXT_PART, "content": message.get("content")}]
            parts += [{A.GEN_AI_PART_TYPE: A.GEN_AI_TOOL_CALL_PART, **call} for call in message.get("tool_calls") or [] if isinstance(call, dict)]
        parts = [p for p in parts if isinstance(p, dict)]
        responses = [p for p in parts if p.get(A.GEN_AI_PART_TYPE) == A.GEN_AI_TOOL_CALL_RESPONSE_PART]
        if responses:  # one tool message per result
            out += [{"role": "tool", "tool_call_id": p.get("id"), "content": _part_text(p)} for p in responses]
            continue
        entry: dict[str, Any] = {"role": role, "content": "".join(_part_text(p) for p in parts)}
        calls = [p for p in parts if p.get(A.GEN_AI_PART_TYPE) == A.GEN_AI_TOOL_CALL_PART]
        if calls:
            entry["tool_calls"] = [
                {"id": c.get("id"), "type": "function", "function": {
                    "name": c.get("name"),
                    "arguments": c.get("arguments") if isinstance(c.get("arguments"), str) else json.dumps(c.get("arguments") or {}),
                }}
                for c in calls
            ]
        out.append(entry)
    return out


def chat_messages(messages_json_text: str | None) -> list[dict[str, str]]:
    """``[{role, content}]`` of a dataset's message JSON, whatever layout it came from.

    GenAI JSON keeps text in ``parts``; flattened layouts in ``content``. Tool calls are
    written as JSON text, for readers (judges, exports): not the markup the model wrote them in,
    which only its chat template knows (:func:`request_messages` gives them to it).
    """
    if not messages_json_text:
        return []
    out = []
    for message in json.loads(messages_json_text):
        if not isinstance(message, dict):
            continue
        parts = message.get(A.GEN_AI_MESSAGE_PARTS)
        content = _text(parts) if parts is not None else _text(message.get("content"))
        calls = [p for p in parts or [] if isinstance(p, dict) and p.get(A.GEN_AI_PART_TYPE) == A.GEN_AI_TOOL_CALL_PART]
        calls += message.get("tool_calls") or []
        if calls:
            content += "".join(
                json.dumps({"name": c.get("name"), "arguments": c.get("arguments")}, ensure_ascii=False) for c in calls
            )
        out.append({"role": str(message.get("role", "user")), "content": content})
    return out
