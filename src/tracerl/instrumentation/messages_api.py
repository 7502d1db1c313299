"""Anthropic's Messages API (``POST .../v1/messages``) captured like Chat Completions.

The ``anthropic`` SDK sends its requests with httpx (``httpx2`` in its 2.x), so its calls are
captured by :mod:`~tracerl.instrumentation.httpx_hook`, as hand-written clients' are; the
gateway records them too. One call is one LLM-call span (operation ``chat``,
``tracerl.llm.api = messages``, provider ``anthropic``) with the attributes the pipeline reads
for chat calls, so a Messages call becomes a transition by the same path:

- input: ``system`` (a string or text blocks) a system message first (and
  ``gen_ai.system_instructions``), each message by its role with its blocks as parts: ``text``
  as text, ``tool_use`` as a ``tool_call`` part (its ``input`` as JSON text), ``thinking`` as a
  ``reasoning`` part; each ``tool_result`` block becomes a ``tool`` message's
  ``tool_call_response`` part (its text blocks joined by newlines), put before what else its
  user message holds, as vLLM and ``tracerl serve`` give them to the chat template. A block
  of another type (an image, a document, a server tool's block, one no API has yet) is kept
  whole as a part of its own type, never dropped or guessed at;
- output: the message's content blocks as one assistant message, its ``stop_reason`` as the
  finish reason in chat's words: ``tool_use`` -> ``tool_calls``, ``max_tokens`` -> ``length``,
  ``end_turn`` and ``stop_sequence`` -> ``stop`` (another reason is kept as it is);
- tools: ``{name, description, input_schema}`` as GenAI's flat function definitions
  (``parameters``); a server tool (``{"type": "web_search_20250305", ...}``) is kept whole.

Token ids: the Messages API has no token fields, so the request asks for chat's
(``return_token_ids``, ``logprobs``): ``tracerl serve`` answers with ``prompt_token_ids``,
``token_ids`` and chat-shaped ``logprobs`` at the top level of the message (of the
``message_delta`` event when streamed), cut out before the agent's SDK reads the answer. vLLM
0.32's ``/v1/messages`` ignores them and returns no ids: such calls are recorded with their
messages and counted as calls without token ids (``pipeline build-dataset --retokenize``
rebuilds them, with its fidelity check).
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from tracerl.schemas import attributes as A

# the events of a streamed message (Anthropic's names)
MESSAGE_START = "message_start"
BLOCK_START = "content_block_start"
BLOCK_DELTA = "content_block_delta"
MESSAGE_DELTA = "message_delta"
MESSAGE_STOP = "message_stop"

# stop_reason -> the finish reason chat calls it (the pipeline's and the retokenizer's words)
FINISH_REASONS = {"end_turn": "stop", "stop_sequence": "stop", "tool_use": "tool_calls", "max_tokens": "length"}


# ---- messages in the GenAI conventions' shapes ------------------------------------------
def _text_part(text: str) -> dict[str, Any]:
    return {A.GEN_AI_PART_TYPE: A.GEN_AI_TEXT_PART, "content": text}


def arguments(value: Any) -> str:
    """A ``tool_use`` block's ``input`` as the JSON text a chat tool call carries (as vLLM writes it)."""
    return value if isinstance(value, str) else json.dumps(value)


def _tool_call(block: dict[str, Any]) -> dict[str, Any]:
    return {A.GEN_AI_PART_TYPE: A.GEN_AI_TOOL_CALL_PART, "id": block.get("id"), "name": block.get("name"),
            A.GEN_AI_TOOL_CALL_ARGUMENTS: arguments(block.get("input", {}))}


def _part(block: Any) -> dict[str, Any] | None:
    """One content block as a GenAI part (a tool_result is not one: it is a message of its own)."""
    if isinstance(block, str):
        return _text_part(block)
    if not isinstance(block, dict):
        return None
    kind = block.get("type")
    if kind == "text":
        return _text_part(str(block.get("text") or ""))
    if kind == "tool_use":
        return _tool_call(block)
    if kind == "thinking":
        return {A.GEN_AI_PART_TYPE: A.GEN_AI_REASONING_PART, "content": str(block.get("thinking") or "")}
    return dict(block)  # images, documents, server tools' blocks, types to come: kept whole


def result_text(content: Any) -> str:
    """A ``tool_result`` block's ``content``: text, or blocks whose text is joined by newlines (as vLLM does)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "\n".join(str(b.get("text") or "") for b in content if isinstance(b, dict) and b.get("type") == "text")


def _tool_message(block: dict[str, Any]) -> dict[str, Any]:
    response: dict[str, Any] = {A.GEN_AI_PART_TYPE: A.GEN_AI_TOOL_CALL_RESPONSE_PART, "id": block.get("tool_use_id"),
                                "response": result_text(block.get("content"))}
    if block.get("is_error"):
        response["is_error"] = True
    parts = [response]
    content = block.get("content")
    # what a result holds besides text (an image...) follows it, whole
    parts += [dict(b) for b in content if isinstance(b, dict) and b.get("type") != "text"] if isinstance(content, list) else []
    return {"role": "tool", A.GEN_AI_MESSAGE_PARTS: parts}


def system_parts(system: Any) -> list[dict[str, Any]]:
    """The request's ``system``: a string, or text blocks (other blocks kept whole)."""
    if isinstance(system, str):
        return [_text_part(system)] if system else []
    if not isinstance(system, list):
        return []
    return [part for block in system if (part := _part(block)) is not None]


def input_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    """A Messages request's ``system`` and ``messages`` as GenAI messages."""
    messages: list[dict[str, Any]] = []
    system = system_parts(body.get("system"))
    if system:
        messages.append({"role": "system", A.GEN_AI_MESSAGE_PARTS: system})
    for message in body.get("messages") if isinstance(body.get("messages"), list) else ():
        if not isinstance(message, dict):
            continue
        role, content = message.get("role"), message.get("content")
        if not isinstance(content, list):
            parts = [_text_part(content)] if isinstance(content, str) and content else []
            messages.append({"role": role, A.GEN_AI_MESSAGE_PARTS: parts})
            continue
        results = [_tool_message(b) for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
        parts = [part for b in content
                 if not (isinstance(b, dict) and b.get("type") == "tool_result") and (part := _part(b)) is not None]
        messages += results  # a user turn's tool results first, then what else it says
        if parts or not results:
            messages.append({"role": role, A.GEN_AI_MESSAGE_PARTS: parts})
    return messages


def finish_reason(stop_reason: Any) -> str | None:
    """A ``stop_reason`` in chat's words (``None``: the message did not end, a stream cut short)."""
    if stop_reason is None:
        return None
    return FINISH_REASONS.get(stop_reason, str(stop_reason))


def output_message(answer: dict[str, Any]) -> dict[str, Any]:
    """A message's content blocks as one GenAI assistant message."""
    content = answer.get("content")
    parts = [part for b in content if (part := _part(b)) is not None] if isinstance(content, list) else []
    return {"role": "assistant", A.GEN_AI_MESSAGE_PARTS: parts, A.GEN_AI_FINISH_REASON: finish_reason(answer.get("stop_reason"))}


def tool_definitions(tools: list[Any]) -> list[Any]:
    """Anthropic's tools as GenAI's flat function definitions; a server tool is kept whole."""
    flat = []
    for tool in tools:
        if isinstance(tool, dict) and tool.get("type") in (None, "custom") and "input_schema" in tool:
            definition = {"type": "function", "name": tool.get("name")}
            if tool.get("description") is not None:
                definition["description"] = tool["description"]
            definition["parameters"] = tool["input_schema"]
            flat.append(definition)
        else:
            flat.append(tool)
    return flat


def request_attributes(body: dict[str, Any], content: bool) -> dict[str, Any]:
    """The attributes of a Messages request beyond those every call has (llm_span.request_attributes)."""
    attributes: dict[str, Any] = {A.LLM_API: A.LLM_API_MESSAGES}
    top_k = body.get("top_k")
    if isinstance(top_k, int) and not isinstance(top_k, bool):
        attributes[A.GEN_AI_REQUEST_TOP_K] = top_k
    stops = body.get("stop_sequences")
    if isinstance(stops, list) and stops and all(isinstance(s, str) for s in stops):
        attributes[A.GEN_AI_REQUEST_STOP_SEQUENCES] = stops
    if content and (system := system_parts(body.get("system"))):
        attributes[A.GEN_AI_SYSTEM_INSTRUCTIONS] = orjson.dumps(system).decode()
    return attributes


def usage(answer: dict[str, Any]) -> tuple[Any, Any]:
    found = answer.get("usage") if isinstance(answer.get("usage"), dict) else {}
    return found.get("input_tokens"), found.get("output_tokens")


# ---- a streamed message, put back together --------------------------------------------------
class StreamedMessage:
    """The message a stream of Messages events describes, as far as it came: what the agent's SDK
    puts together from the same events (text and thinking deltas appended, a tool call's
    ``input_json_delta`` pieces joined and read as JSON at the end)."""

    def __init__(self) -> None:
        self.message: dict[str, Any] = {}
        self.blocks: dict[int, dict[str, Any]] = {}
        self.json: dict[int, list[str]] = {}  # a tool_use block's input, as it is streamed
        self.stop_reason: str | None = None
        self.output_tokens: Any = None

    def event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == MESSAGE_START and isinstance(event.get("message"), dict):
            self.message = event["message"]
        elif kind == BLOCK_START and isinstance(event.get("content_block"), dict):
            self.blocks[event.get("index", len(self.blocks))] = dict(event["content_block"])
        elif kind == BLOCK_DELTA and isinstance(event.get("delta"), dict):
            block, delta = self.blocks.get(event.get("index")), event["delta"]
            if block is None:
                return
            step = delta.get("type")
            if step == "text_delta":
                block["text"] = (block.get("text") or "") + str(delta.get("text") or "")
            elif step == "input_json_delta":
                self.json.setdefault(event.get("index"), []).append(str(delta.get("partial_json") or ""))
            elif step == "thinking_delta":
                block["thinking"] = (block.get("thinking") or "") + str(delta.get("thinking") or "")
        elif kind == MESSAGE_DELTA:
            delta = event.get("delta") if isinstance(event.get("delta"), dict) else {}
            self.stop_reason = delta.get("stop_reason") or self.stop_reason
            if isinstance(event.get("usage"), dict):
                self.output_tokens = event["usage"].get("output_tokens", self.output_tokens)

    def answer(self) -> dict[str, Any]:
        """The message as a whole answer's body would be (``content`` absent when no block came)."""
        answer = {"id": self.message.get("id"), "model": self.message.get("model")}
        if not self.blocks and self.stop_reason is None:
            return answer
        content = []
        for index in sorted(self.blocks):
            block = self.blocks[index]
            if index in self.json:
                text = "".join(self.json[index])
                try:  # as the SDK reads it; text that is no JSON stays text (a malformed call)
                    block["input"] = json.loads(text) if text else {}
                except json.JSONDecodeError:
                    block["input"] = text
            content.append(block)
        answer.update(content=content, stop_reason=self.stop_reason)
        input_tokens = (self.message.get("usage") or {}).get("input_tokens") if isinstance(self.message.get("usage"), dict) else None
        answer["usage"] = {"input_tokens": input_tokens, "output_tokens": self.output_tokens}
        return answer
