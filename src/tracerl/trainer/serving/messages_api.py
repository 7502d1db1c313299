"""Anthropic's Messages API of the built-in server (``POST /v1/messages``): the subset the
``anthropic`` SDK uses, answered with the exact token ids capture needs.

A request becomes chat messages, and its prompt the same chat template a Chat Completions call
with those messages gets (:func:`chat_request`), converted as vLLM 0.32's ``/v1/messages``
converts them: ``system`` (text, or text blocks joined) a system message first; each message by
its role, its text blocks joined; an assistant's ``tool_use`` blocks the tool calls of its
message (``input`` as JSON text); each ``tool_result`` block a ``tool`` message (its text blocks
joined by newlines), put before what else its user message says; ``thinking`` blocks passed over
(this server's models write none). ``tools`` (``name``, ``description``, ``input_schema``) are the
chat endpoint's function tools, ``tool_choice`` its ``auto`` / ``required`` / ``none`` / named
tool, and a hermes ``<tool_call>`` reply becomes ``tool_use`` blocks.

The answer is Anthropic's message (``stop_reason`` ``end_turn``, ``tool_use``, ``max_tokens`` or
``stop_sequence`` with the ``stop_sequence`` that matched), streamed as Anthropic's events when
asked. With ``return_token_ids`` it carries ``prompt_token_ids`` and ``token_ids`` at its top
level, with ``logprobs: true`` the sampled tokens' log-probs in chat's shape (``{"content":
[...]}``) beside them (streamed: on the ``message_delta`` event); every message, and the
``message_start`` and ``message_delta`` events of a stream, names the policy version.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

from tracerl.schemas import attributes as A
from tracerl.trainer.serving import tool_parser
from tracerl.trainer.serving.engine import ChoiceResult, GenerationHandle, TokenStep
from tracerl.trainer.serving.protocol import ChatCompletionRequest, MessagesRequest, RequestError, parse_request
from tracerl.trainer.serving.responses import PROMPT_TOKEN_IDS, TOKEN_IDS, _Reply

_SKIPPED_BLOCKS = ("thinking", "redacted_thinking")  # reasoning this server's models never write
_TOOL_CHOICES = {"auto": "auto", "any": "required", "none": "none"}


# ---- the conversation ---------------------------------------------------------------------
def _text(block: dict[str, Any], where: str) -> str:
    if not isinstance(block.get("text"), str):
        raise RequestError(f"{where}.text must be a string", param=f"{where}.text")
    return block["text"]


def _unserved(kind: Any, where: str, served: str) -> RequestError:
    return RequestError(f"{where} is a block of type {kind!r}; the built-in server (a text-only model) takes {served}",
                        param=where)


def _system(system: str | list[dict[str, Any]] | None) -> str:
    if system is None or isinstance(system, str):
        return system or ""
    text = ""
    for i, block in enumerate(system):
        if block.get("type") != "text":
            raise _unserved(block.get("type"), f"system[{i}]", "text blocks in system")
        text += _text(block, f"system[{i}]")
    return text


def _result_text(content: Any, where: str) -> str:
    """A tool_result's ``content``: text, or text blocks joined by newlines (as vLLM joins them)."""
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, list):
        raise RequestError(f"{where}.content must be a string or a list of blocks", param=f"{where}.content")
    texts = []
    for k, block in enumerate(content):
        at = f"{where}.content[{k}]"
        if not isinstance(block, dict) or block.get("type") != "text":
            raise _unserved(block.get("type") if isinstance(block, dict) else None, at, "text blocks in a tool_result")
        texts.append(_text(block, at))
    return "\n".join(texts)


def chat_messages(req: MessagesRequest) -> list[dict]:
    """``system`` and ``messages`` as chat messages (ChatCompletionRequest's shape)."""
    system = _system(req.system)
    messages: list[dict] = [{"role": "system", "content": system}] if system else []
    for i, message in enumerate(req.messages):
        where = f"messages[{i}]"
        role, content = message.get("role"), message.get("content")
        if role not in ("user", "assistant"):
            raise RequestError(f"{where}.role must be 'user' or 'assistant' (the system prompt is the request's system)",
                               param=f"{where}.role")
        if isinstance(content, str):
            messages.append({"role": role, "content": content})
            continue
        if not isinstance(content, list):
            raise RequestError(f"{where}.content must be a string or a list of content blocks", param=f"{where}.content")
        text, calls, results = "", [], []
        for j, block in enumerate(content):
            at = f"{where}.content[{j}]"
            kind = block.get("type") if isinstance(block, dict) else None
            if kind == "text":
                text += _text(block, at)
            elif kind == "tool_use" and role == "assistant":
                if not isinstance(block.get("name"), str):
                    raise RequestError(f"{at}: a tool_use block needs its name", param=f"{at}.name")
                calls.append({"id": block.get("id"), "type": "function",
                              "function": {"name": block["name"], "arguments": json.dumps(block.get("input") or {})}})
            elif kind == "tool_result" and role == "user":
                results.append({"role": "tool", "tool_call_id": block.get("tool_use_id"),
                                "content": _result_text(block.get("content"), at)})
            elif kind in _SKIPPED_BLOCKS:
                continue
            else:
                served = ("text and tool_use blocks in an assistant message" if role == "assistant"
                          else "text and tool_result blocks in a user message")
                raise _unserved(kind, at, served)
        messages += results  # the turn's tool results, then what else it says (vLLM's order)
        if calls:
            messages.append({"role": "assistant", "content": text, "tool_calls": calls})
        elif text or not results:
            messages.append({"role": role, "content": text})
    return messages


def chat_tools(tools: list[dict[str, Any]] | None) -> list[dict] | None:
    """Anthropic's tools in the chat endpoint's shape (``{"type", "function": {name, description, parameters}}``)."""
    if not tools:
        return None
    converted = []
    for i, tool in enumerate(tools):
        if tool.get("type") not in (None, "custom"):
            raise RequestError(f"tools[{i}] is a {tool.get('type')!r} tool; the built-in server serves custom tools "
                               "({name, description, input_schema}) only (server tools run on Anthropic's servers)",
                               param=f"tools[{i}]")
        if not isinstance(tool.get("name"), str):
            raise RequestError(f"tools[{i}].name is required", param=f"tools[{i}].name")
        if not isinstance(tool.get("input_schema"), dict):
            raise RequestError(f"tools[{i}].input_schema must be a JSON schema object", param=f"tools[{i}].input_schema")
        function = {"name": tool["name"], "parameters": tool["input_schema"]}
        if tool.get("description") is not None:
            function["description"] = tool["description"]
        converted.append({"type": "function", "function": function})
    return converted


def chat_tool_choice(choice: dict[str, Any] | None) -> str | dict | None:
    if choice is None:
        return None
    kind = choice.get("type")
    if kind in _TOOL_CHOICES:
        return _TOOL_CHOICES[kind]
    if kind == "tool":
        if not isinstance(choice.get("name"), str):
            raise RequestError("tool_choice.name is required when tool_choice.type is 'tool'", param="tool_choice.name")
        return {"type": "function", "function": {"name": choice["name"]}}
    raise RequestError(f"tool_choice.type {kind!r} is not one of auto, any, tool, none", param="tool_choice.type")


def chat_request(req: MessagesRequest) -> ChatCompletionRequest:
    """The chat request whose prompt this request's is."""
    if req.top_logprobs and not req.logprobs:
        raise RequestError("top_logprobs needs logprobs: true", param="top_logprobs")
    body: dict[str, Any] = {"messages": chat_messages(req)}
    tools = chat_tools(req.tools)
    if tools:
        body["tools"] = tools
    choice = chat_tool_choice(req.tool_choice)
    if choice is not None:
        body["tool_choice"] = choice
    try:
        return parse_request(ChatCompletionRequest, body)
    except RequestError as exc:  # named as the chat messages they became
        raise RequestError(f"messages: {exc.message}", param="messages") from None


# ---- the answer ---------------------------------------------------------------------------
class MessagesReply(_Reply):
    """Builds one message: the whole body, or its stream of events."""

    object_name = chunk_object_name = "message"
    id_prefix = "msg"

    def __init__(self, req: MessagesRequest, prompt: list[int], tokenizer, served_model: str) -> None:
        super().__init__(req, tokenizer, served_model)
        self.id = f"msg_{uuid.uuid4().hex}"  # Anthropic's spelling: msg_..., toolu_...
        self.prompt = prompt
        self.parse_tools = bool(req.tools) and (req.tool_choice or {}).get("type") != "none"

    # ---- pieces --------------------------------------------------------------------------
    def _split(self, result: ChoiceResult) -> tuple[str, list[dict]]:
        """The reply's text and its tool_use blocks (a call whose arguments are no JSON object leaves the reply text)."""
        parsed = tool_parser.parse(result.text) if self.parse_tools else None
        if parsed is None:
            return result.text, []
        blocks = []
        for call in parsed.tool_calls:
            try:
                arguments = json.loads(call["function"]["arguments"])
            except json.JSONDecodeError:
                return result.text, []
            if not isinstance(arguments, dict):
                return result.text, []
            blocks.append({"type": "tool_use", "id": f"toolu_{uuid.uuid4().hex[:24]}", "name": call["function"]["name"],
                           "input": arguments})
        return parsed.content or "", blocks

    @staticmethod
    def _stop(result: ChoiceResult, calls: list[dict]) -> tuple[str, str | None]:
        """stop_reason and stop_sequence, as vLLM maps them: the token limit first, then a tool call."""
        if result.finish_reason == "length":
            return "max_tokens", None
        if calls:
            return "tool_use", None
        if result.stop_string is not None:
            return "stop_sequence", result.stop_string
        return "end_turn", None

    def _message(self, content: list[dict], stop: tuple[str | None, str | None], output_tokens: int) -> dict:
        return {"id": self.id, "type": "message", "role": "assistant", "model": self.model, "content": content,
                "stop_reason": stop[0], "stop_sequence": stop[1],
                "usage": {"input_tokens": len(self.prompt), "output_tokens": output_tokens}}

    def _add_tokens(self, holder: dict, result: ChoiceResult) -> None:
        if self.req.return_token_ids:
            holder[PROMPT_TOKEN_IDS] = self.prompt
            holder[TOKEN_IDS] = result.token_ids
        if self.req.logprobs:
            holder[A.MESSAGES_LOGPROBS_FIELD] = {"content": [
                self._logprob(t, lp, tops) for t, lp, tops in zip(result.token_ids, result.logprobs, result.top_logprobs)]}
        holder[A.POLICY_VERSION_FIELD] = self.version

    # ---- whole body ----------------------------------------------------------------------
    def body(self, results: list[ChoiceResult]) -> dict:
        if not results:  # the client hung up: nobody reads this
            return self._message([], (None, None), 0)
        result = results[0]
        text, calls = self._split(result)
        content = ([{"type": "text", "text": text}] if text or not calls else []) + calls
        body = self._message(content, self._stop(result, calls), len(result.token_ids))
        self._add_tokens(body, result)
        return body

    # ---- stream --------------------------------------------------------------------------
    async def stream(self, handle: GenerationHandle) -> AsyncIterator[dict]:
        """Anthropic's events: message_start, the text block's deltas, each tool_use block, message_delta, message_stop."""
        start = self._message([], (None, None), 0)
        start[A.POLICY_VERSION_FIELD] = self.version
        yield {"type": "message_start", "message": start}
        shown = sent = ""
        opened = False
        result: ChoiceResult | None = None
        async for event in handle.events():
            if isinstance(event, TokenStep):
                shown += event.text
                visible = shown[: len(shown) - tool_parser.held_back(shown)] if self.parse_tools else shown
                if len(visible) > len(sent):
                    if not opened:
                        opened = True
                        yield _block_start(0, {"type": "text", "text": ""})
                    yield _delta(0, {"type": "text_delta", "text": visible[len(sent):]})
                    sent = visible
            else:
                result = event
        assert result is not None
        text, calls = self._split(result)
        if not calls:
            if not opened:  # an empty reply is one empty text block, as Anthropic's
                opened = True
                yield _block_start(0, {"type": "text", "text": ""})
            if len(text) > len(sent):  # what was held back and turned out to be no call
                yield _delta(0, {"type": "text_delta", "text": text[len(sent):]})
        if opened:
            yield {"type": "content_block_stop", "index": 0}
        for index, call in enumerate(calls, start=1 if opened else 0):
            yield _block_start(index, {**call, "input": {}})
            yield _delta(index, {"type": "input_json_delta", "partial_json": json.dumps(call["input"])})
            yield {"type": "content_block_stop", "index": index}
        stop_reason, stop_sequence = self._stop(result, calls)
        ending = {"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
                  "usage": {"output_tokens": len(result.token_ids)}}
        self._add_tokens(ending, result)
        yield ending
        yield {"type": "message_stop"}


def _block_start(index: int, block: dict) -> dict:
    return {"type": "content_block_start", "index": index, "content_block": block}


def _delta(index: int, delta: dict) -> dict:
    return {"type": "content_block_delta", "index": index, "delta": delta}
