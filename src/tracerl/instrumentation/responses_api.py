"""The OpenAI Responses API (``POST .../responses``) captured like Chat Completions.

One call is one LLM-call span (operation ``chat``, ``tracerl.llm.api = responses``) with the
attributes the pipeline reads for chat calls, so a Responses call becomes a transition by the
same path:

- input: ``instructions`` a system message first (and ``gen_ai.system_instructions``), ``input``
  text a user message, ``message`` items by their role, ``function_call`` items the
  ``tool_call`` parts of an assistant message (the calls of one model turn in one message, as
  a chat template renders them), each ``function_call_output`` a ``tool`` message's
  ``tool_call_response`` part; an item of another type (reasoning, a hosted tool's call...)
  is kept whole as a part of its own type, never dropped or guessed at;
- output: the response's items as one assistant message (``output_text`` parts as text,
  ``function_call`` items as ``tool_call`` parts keyed by their ``call_id``), its finish reason
  ``tool_calls`` when it called a function, ``length`` when it was cut at
  ``max_output_tokens``;
- ``previous_response_id`` is recorded (``tracerl.llm.previous_response_id``): the pipeline
  puts the earlier turns of the conversation before the call's own input
  (``tracerl.pipeline.writer``); the server's prompt ids already hold them.

Token ids: the request asks for vLLM's ``enable_response_messages`` (vLLM 0.32 and ``tracerl
serve`` answer with the prompt's and the completion's ids as ``input_messages`` /
``output_messages``, one ``raw_message_tokens`` entry each), which are cut out of the answer
before the agent's SDK reads it, as for chat. The log-probs are the completion entry's
``logprobs`` (``tracerl serve``), else those of the ``output_text`` parts when the agent asked
for them itself (``include=["message.output_text.logprobs"]``) and they cover every token. A
server that answers without ids (OpenAI itself, a harmony model's message list, a response
that ran several model turns) makes a call without token ids, counted as such.
"""

from __future__ import annotations

from typing import Any

import msgspec
import orjson

from tracerl.instrumentation.call_tokens import Tokens, read_policy_version
from tracerl.schemas import attributes as A

# what the request asks for and the answer carries (vLLM's names)
MESSAGES_FIELD = "enable_response_messages"
INPUT_MESSAGES_FIELD = "input_messages"
OUTPUT_MESSAGES_FIELD = "output_messages"
# the events of a streamed response whose "response" is the whole response, and the last ones
RESPONSE_EVENTS = ("response.created", "response.in_progress", "response.queued")
FINAL_EVENTS = ("response.completed", "response.incomplete", "response.failed")

_TEXT_PARTS = ("input_text", "output_text", "text")


# ---- messages in the GenAI conventions' shapes ------------------------------------------
def _text_part(text: str) -> dict[str, Any]:
    return {A.GEN_AI_PART_TYPE: A.GEN_AI_TEXT_PART, "content": text}


def _parts(content: Any) -> list[dict[str, Any]]:
    """A message item's ``content``: text, or a list of parts (text parts as GenAI text, others kept whole)."""
    if isinstance(content, str):
        return [_text_part(content)] if content else []
    parts = []
    for part in content if isinstance(content, list) else ():
        if isinstance(part, dict) and part.get("type") in _TEXT_PARTS:
            parts.append(_text_part(str(part.get("text") or "")))
        elif isinstance(part, dict) and part.get("type") == "refusal":
            parts.append(_text_part(str(part.get("refusal") or "")))
        elif isinstance(part, dict):
            parts.append(dict(part))
    return parts


def _tool_call(item: dict[str, Any]) -> dict[str, Any]:
    return {A.GEN_AI_PART_TYPE: A.GEN_AI_TOOL_CALL_PART, "id": item.get("call_id") or item.get("id"),
            "name": item.get("name"), A.GEN_AI_TOOL_CALL_ARGUMENTS: item.get("arguments")}


def _output_text(output: Any) -> str:
    """A function_call_output's ``output``: text, or a list of parts whose text is joined."""
    if isinstance(output, str):
        return output
    return "".join(p.get("content", "") for p in _parts(output) if p.get(A.GEN_AI_PART_TYPE) == A.GEN_AI_TEXT_PART)


def input_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    """A Responses request's ``instructions`` and ``input`` as GenAI messages."""
    messages: list[dict[str, Any]] = []
    instructions = body.get("instructions")
    if isinstance(instructions, str) and instructions:
        messages.append({"role": "system", A.GEN_AI_MESSAGE_PARTS: [_text_part(instructions)]})
    items = body.get("input")
    if isinstance(items, str):
        return [*messages, {"role": "user", A.GEN_AI_MESSAGE_PARTS: [_text_part(items)]}]
    for item in items if isinstance(items, list) else ():
        if not isinstance(item, dict):
            continue
        kind = item.get("type") or ("message" if "role" in item else None)
        if kind == "message":
            messages.append({"role": item.get("role"), A.GEN_AI_MESSAGE_PARTS: _parts(item.get("content"))})
        elif kind == "function_call":
            last = messages[-1] if messages else None
            if last is not None and last.get("role") == "assistant":  # one model turn: its text and its calls
                last[A.GEN_AI_MESSAGE_PARTS].append(_tool_call(item))
            else:
                messages.append({"role": "assistant", A.GEN_AI_MESSAGE_PARTS: [_tool_call(item)]})
        elif kind == "function_call_output":
            messages.append({"role": "tool", A.GEN_AI_MESSAGE_PARTS: [{
                A.GEN_AI_PART_TYPE: A.GEN_AI_TOOL_CALL_RESPONSE_PART, "id": item.get("call_id"),
                "response": _output_text(item.get("output"))}]})
        else:  # reasoning, item references, hosted tools' items: kept whole, as a part of their own type
            messages.append({"role": item.get("role") or "assistant", A.GEN_AI_MESSAGE_PARTS: [dict(item)]})
    return messages


def finish_reason(answer: dict[str, Any]) -> str | None:
    """Why the response ended, in chat's words: tool_calls, length (cut at its token limit), stop, or its status."""
    status = answer.get("status")
    output = answer.get("output") if isinstance(answer.get("output"), list) else []
    if status == "incomplete":
        details = answer.get("incomplete_details") or {}
        reason = details.get("reason") if isinstance(details, dict) else None
        return "length" if reason in (None, "max_output_tokens") else str(reason)
    if any(isinstance(item, dict) and item.get("type") == "function_call" for item in output):
        return "tool_calls"
    if status in (None, "completed"):
        return "stop"
    return str(status)


def output_message(answer: dict[str, Any]) -> dict[str, Any]:
    """A response's output items as one GenAI assistant message."""
    parts: list[dict[str, Any]] = []
    for item in answer.get("output") if isinstance(answer.get("output"), list) else ():
        if not isinstance(item, dict):
            continue
        if item.get("type") == "message":
            parts += _parts(item.get("content"))
        elif item.get("type") == "function_call":
            parts.append(_tool_call(item))
        else:
            parts.append(dict(item))
    return {"role": "assistant", A.GEN_AI_MESSAGE_PARTS: parts, A.GEN_AI_FINISH_REASON: finish_reason(answer)}


def request_attributes(body: dict[str, Any], content: bool) -> dict[str, Any]:
    """The attributes of a Responses request beyond those every call has (llm_span.request_attributes)."""
    attributes: dict[str, Any] = {A.LLM_API: A.LLM_API_RESPONSES}
    limit = body.get("max_output_tokens")
    if isinstance(limit, int) and not isinstance(limit, bool):
        attributes[A.GEN_AI_REQUEST_MAX_TOKENS] = limit
    if isinstance(body.get("previous_response_id"), str):
        attributes[A.PREVIOUS_RESPONSE_ID] = body["previous_response_id"]
    if content and isinstance(body.get("instructions"), str) and body["instructions"]:
        attributes[A.GEN_AI_SYSTEM_INSTRUCTIONS] = orjson.dumps([_text_part(body["instructions"])]).decode()
    return attributes


def usage(answer: dict[str, Any]) -> tuple[Any, Any]:
    found = answer.get("usage") if isinstance(answer.get("usage"), dict) else {}
    return found.get("input_tokens"), found.get("output_tokens")


# ---- token ids and log-probs ------------------------------------------------------------
class _RawMessage(msgspec.Struct, gc=False):
    """An input_messages / output_messages entry (vLLM's raw_message_tokens; tracerl serve adds logprobs)."""

    tokens: list[int] | None = None
    logprobs: list[float] | None = None


class _TokenLogprob(msgspec.Struct, gc=False):
    logprob: float


class _Part(msgspec.Struct, gc=False):
    type: str = ""
    logprobs: list[_TokenLogprob] | None = None


class _Item(msgspec.Struct, gc=False):
    type: str = ""
    content: list[_Part] | None = None


def _decode(raw: msgspec.Raw | bytes | Any, kind: type) -> Any:
    if raw is None:
        return None
    try:
        if isinstance(raw, (msgspec.Raw, bytes)):
            return msgspec.json.decode(memoryview(raw) if isinstance(raw, msgspec.Raw) else raw, type=kind)
        return msgspec.convert(raw, kind)
    except msgspec.MsgspecError:  # another shape (a harmony model's messages): no ids read from it
        return None


def _only_tokens(raw: Any) -> _RawMessage | None:
    """The one entry of a list of raw messages that has token ids (more than one: several model turns)."""
    entries = _decode(raw, list[_RawMessage])
    if not entries or len(entries) != 1 or entries[0].tokens is None:
        return None
    return entries[0]


def _output_text_logprobs(output: Any, length: int) -> list[float] | None:
    """The log-probs of the output_text parts, when there are some for every one of ``length`` tokens."""
    items = _decode(output, list[_Item])
    floats = [lp.logprob for item in items or () for part in item.content or () for lp in part.logprobs or ()]
    return floats if floats and len(floats) == length else None


def read_tokens(input_messages: Any, output_messages: Any, output: Any, policy_version: Any,
                headers: Any = None) -> Tokens:
    """A response's exact tokens from its (raw or parsed) input_messages, output_messages and output."""
    prompt, completion = _only_tokens(input_messages), _only_tokens(output_messages)
    tokens = Tokens(policy_version=read_policy_version(policy_version, headers))
    if prompt is None or completion is None:
        return tokens
    tokens.prompt_ids, tokens.completion_ids = prompt.tokens, completion.tokens
    if completion.logprobs is not None and len(completion.logprobs) == len(completion.tokens):
        tokens.logprobs = completion.logprobs
    elif output is not None:
        tokens.logprobs = _output_text_logprobs(output, len(completion.tokens))
    return tokens


def strip_response(plan_strips: bool, response: dict[str, Any]) -> tuple[Any, Any]:
    """Take the token members out of a parsed response (``plan_strips``), or read them where they are."""
    pick = response.pop if plan_strips else response.get
    return pick(INPUT_MESSAGES_FIELD, None), pick(OUTPUT_MESSAGES_FIELD, None)
