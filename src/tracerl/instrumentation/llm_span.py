"""GenAI attributes of an LLM-call span, from the request and response bodies.

Used where tracerl makes the LLM-call span itself (the in-process hook when OpenLLMetry
is not the span maker, and the gateway). The names and shapes are the OpenTelemetry GenAI
conventions' (messages as JSON attributes with typed parts: :mod:`genai_messages`);
``gen_ai.system``, which ``gen_ai.provider.name`` replaced, is written too until
``OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental`` says the reader needs only the latest.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import orjson

from tracerl.instrumentation import genai_messages, messages_api, responses_api
from tracerl.instrumentation.answer_stream import StreamTokens
from tracerl.instrumentation.settings import settings
from tracerl.schemas import attributes as A

_REQUEST_PARAMS = {
    "temperature": A.GEN_AI_REQUEST_TEMPERATURE,
    "top_p": A.GEN_AI_REQUEST_TOP_P,
    "max_tokens": A.GEN_AI_REQUEST_MAX_TOKENS,
    "max_completion_tokens": A.GEN_AI_REQUEST_MAX_TOKENS,
    "seed": A.GEN_AI_REQUEST_SEED,
}


def operation(kind: str) -> str:
    """The GenAI operation name of a ``chat``, ``completions``, ``responses`` or ``messages`` call (the last two are chats)."""
    return A.GEN_AI_TEXT_COMPLETION if kind == "completions" else A.GEN_AI_CHAT


def _json(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()


def request_attributes(kind: str, body: dict, content: bool) -> dict[str, Any]:
    provider = A.GEN_AI_PROVIDER_ANTHROPIC if kind == "messages" else A.GEN_AI_PROVIDER_OPENAI  # the API, whoever serves it
    attributes: dict[str, Any] = {
        A.GEN_AI_OPERATION: operation(kind),
        A.GEN_AI_PROVIDER_NAME: provider,
        A.GEN_AI_IS_STREAMING: bool(body.get("stream")),
    }
    if not settings().genai_latest_only:
        attributes[A.GEN_AI_SYSTEM] = provider
    if body.get("model") is not None:
        attributes[A.GEN_AI_REQUEST_MODEL] = str(body["model"])
    for field, key in _REQUEST_PARAMS.items():
        value = body.get(field)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            attributes[key] = value
    if kind == "responses":
        attributes.update(responses_api.request_attributes(body, content))
    elif kind == "messages":
        attributes.update(messages_api.request_attributes(body, content))
    if content:
        if kind == "responses":
            messages = responses_api.input_messages(body)
        elif kind == "messages":
            messages = messages_api.input_messages(body)
        else:
            messages = genai_messages.input_messages(kind, body)
        attributes[A.GEN_AI_INPUT_MESSAGES] = _json(messages)
        if isinstance(body.get("tools"), list) and body["tools"]:
            flat = messages_api.tool_definitions if kind == "messages" else genai_messages.tool_definitions
            attributes[A.GEN_AI_TOOL_DEFINITIONS] = _json(flat(body["tools"]))
    return attributes


def response_attributes(kind: str, answer: dict, content: bool) -> dict[str, Any]:
    if kind == "responses":
        return _responses_answer_attributes(answer, content)
    if kind == "messages":
        return _messages_answer_attributes(answer, content)
    attributes: dict[str, Any] = {}
    if answer.get("id"):
        attributes[A.GEN_AI_RESPONSE_ID] = str(answer["id"])
    if answer.get("model"):
        attributes[A.GEN_AI_RESPONSE_MODEL] = str(answer["model"])
    choices = answer.get("choices") or []
    reasons = [str(c["finish_reason"]) for c in choices if c.get("finish_reason")]
    if reasons:
        attributes[A.GEN_AI_RESPONSE_FINISH_REASONS] = reasons
    usage = answer.get("usage") or {}
    if isinstance(usage.get("prompt_tokens"), int):
        attributes[A.GEN_AI_USAGE_INPUT_TOKENS] = usage["prompt_tokens"]
    if isinstance(usage.get("completion_tokens"), int):
        attributes[A.GEN_AI_USAGE_OUTPUT_TOKENS] = usage["completion_tokens"]
    if content:
        outputs = [genai_messages.output_message(c.get("message") if kind == "chat" else {"content": c.get("text")}, c.get("finish_reason"))
                   for c in choices if isinstance(c, dict)]
        attributes[A.GEN_AI_OUTPUT_MESSAGES] = _json(outputs)
    return attributes


def _api_answer_attributes(api: ModuleType, answer: dict, came: bool, content: bool) -> dict[str, Any]:
    """A Responses or Messages answer's attributes (``api``: the module that reads its shape), under
    the same keys as a chat answer's; ``came``: False for a stream cut short before any output."""
    attributes: dict[str, Any] = {}
    if answer.get("id"):
        attributes[A.GEN_AI_RESPONSE_ID] = str(answer["id"])
    if answer.get("model"):
        attributes[A.GEN_AI_RESPONSE_MODEL] = str(answer["model"])
    if not came:
        return attributes
    message = api.output_message(answer)
    if message[A.GEN_AI_FINISH_REASON]:
        attributes[A.GEN_AI_RESPONSE_FINISH_REASONS] = [message[A.GEN_AI_FINISH_REASON]]
    input_tokens, output_tokens = api.usage(answer)
    if isinstance(input_tokens, int):
        attributes[A.GEN_AI_USAGE_INPUT_TOKENS] = input_tokens
    if isinstance(output_tokens, int):
        attributes[A.GEN_AI_USAGE_OUTPUT_TOKENS] = output_tokens
    if content:
        attributes[A.GEN_AI_OUTPUT_MESSAGES] = _json([message])
    return attributes


def _responses_answer_attributes(answer: dict, content: bool) -> dict[str, Any]:
    came = bool(answer.get("output")) or answer.get("status") is not None
    return _api_answer_attributes(responses_api, answer, came, content)


def _messages_answer_attributes(answer: dict, content: bool) -> dict[str, Any]:
    came = "content" in answer or answer.get("stop_reason") is not None
    return _api_answer_attributes(messages_api, answer, came, content)


def answer_attributes(kind: str, body: bytes, content: bool) -> dict[str, Any]:
    """:func:`response_attributes` of a whole answer's JSON (the body the agent was given)."""
    try:
        answer = orjson.loads(body)
    except orjson.JSONDecodeError:  # what msgspec passed on and orjson refuses (ints beyond 64 bits)
        answer = {}
    return response_attributes(kind, answer, content)


def stream_attributes(stream: StreamTokens, content: bool) -> dict[str, Any]:
    """What a streamed response said, once it is over."""
    if stream.plan.kind == "messages":  # its events, put back together
        return response_attributes("messages", stream.message.answer(), content)
    if stream.plan.kind == "responses":  # its last event carried the whole response
        answer = stream.response if stream.ended and stream.response else {"id": stream.response_id, "model": stream.response_model}
        return response_attributes("responses", answer, content)
    answer: dict[str, Any] = {"id": stream.response_id, "model": stream.response_model}
    if stream.finish_reason:
        answer["choices"] = [{"finish_reason": stream.finish_reason}]
    attributes = response_attributes("chat", answer, content=False)
    if content:
        message: dict[str, Any] = {"content": "".join(stream.text), "tool_calls": list(stream.tool_calls.values())}
        attributes[A.GEN_AI_OUTPUT_MESSAGES] = _json([genai_messages.output_message(message, stream.finish_reason)])
    return attributes
