"""OpenAI chat bodies in the shapes of the OpenTelemetry GenAI conventions.

The conventions record messages as ``{"role", "parts": [...]}`` (text, tool calls and tool
results as typed parts) and tool definitions flat (``{"type", "name", "description",
"parameters"}``), so that one reader serves every provider. OpenAI's own shapes
(``content``, ``tool_calls[].function``, ``tool_call_id``) are turned into those here; what
is not text, a tool call or a tool result (an image part...) is kept as its own typed part.
Tool-call arguments stay the JSON text the model wrote, malformed or not: a malformed one
is a signal the pipeline rewards (its ``malformed_tool_call`` rule).
"""

from __future__ import annotations

from typing import Any

from tracerl.schemas import attributes as A


def _text_part(text: str) -> dict[str, Any]:
    return {A.GEN_AI_PART_TYPE: A.GEN_AI_TEXT_PART, "content": text}


def _content_parts(content: Any) -> list[dict[str, Any]]:
    """A message's ``content``: a string, or OpenAI's list of content parts."""
    if isinstance(content, str):
        return [_text_part(content)] if content else []
    if not isinstance(content, list):
        return []
    parts = []
    for part in content:
        if isinstance(part, dict) and part.get("type") == "text":
            parts.append(_text_part(str(part.get("text", ""))))
        elif isinstance(part, dict):
            parts.append(dict(part))
        elif isinstance(part, str):
            parts.append(_text_part(part))
    return parts


def _text(content: Any) -> str:
    return "".join(p.get("content", "") for p in _content_parts(content) if p.get(A.GEN_AI_PART_TYPE) == A.GEN_AI_TEXT_PART)


def _tool_call_part(call: dict[str, Any]) -> dict[str, Any]:
    function = call.get("function") or {}
    return {A.GEN_AI_PART_TYPE: A.GEN_AI_TOOL_CALL_PART, "id": call.get("id"), "name": function.get("name"),
            A.GEN_AI_TOOL_CALL_ARGUMENTS: function.get("arguments")}


def chat_message(message: Any) -> Any:
    """One OpenAI chat message as a GenAI message (anything that is not a message is kept as it is)."""
    if not isinstance(message, dict):
        return message
    role = message.get("role")
    if role == "tool":
        parts = [{A.GEN_AI_PART_TYPE: A.GEN_AI_TOOL_CALL_RESPONSE_PART, "id": message.get("tool_call_id"),
                  "response": _text(message.get("content"))}]
    else:
        parts = _content_parts(message.get("content"))
        parts += [_tool_call_part(c) for c in message.get("tool_calls") or [] if isinstance(c, dict)]
    converted: dict[str, Any] = {"role": role, A.GEN_AI_MESSAGE_PARTS: parts}
    if message.get("name"):
        converted["name"] = message["name"]
    return converted


def input_messages(kind: str, body: dict) -> list[Any]:
    """The request's messages (a completions prompt is one user message)."""
    if kind != "chat":
        prompt = body.get("prompt")
        return [{"role": "user", A.GEN_AI_MESSAGE_PARTS: [_text_part(prompt if isinstance(prompt, str) else str(prompt))]}]
    return [chat_message(m) for m in body.get("messages") or []]


def output_message(message: dict[str, Any] | None, finish_reason: Any) -> dict[str, Any]:
    """One choice of an answer: its message (chat) or ``{"content": text}`` (completions), and why it ended."""
    converted = chat_message({"role": "assistant", **(message or {})})
    converted["finish_reason"] = finish_reason
    return converted


def tool_definitions(tools: list[Any]) -> list[Any]:
    """OpenAI's ``[{"type": "function", "function": {name, description, parameters}}]``, flat."""
    flat = []
    for tool in tools:
        if isinstance(tool, dict) and isinstance(tool.get("function"), dict):
            flat.append({"type": tool.get("type", "function"), **tool["function"]})
        else:
            flat.append(tool)
    return flat
