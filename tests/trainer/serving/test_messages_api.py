"""The built-in server's Anthropic Messages API (``POST /v1/messages``), driven by the real ``anthropic``
client: the prompt is the chat template a Chat Completions call with the same conversation gets,
``return_token_ids`` / ``logprobs`` return its exact token ids and log-probs, the stop reasons are
Anthropic's, and what it does not serve is a 400 naming the field."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from tracerl.core.chat_template import template_prompt_ids
from tracerl.schemas.attributes import POLICY_VERSION_HEADER
from tracerl_testing.installed import require_module

anthropic = require_module("anthropic", "pip install -e '.[frameworks]' (or pip install anthropic)")
pytestmark = pytest.mark.frameworks  # the anthropic SDK comes with the [frameworks] extra

IDS = {"return_token_ids": True, "logprobs": True}
GREEDY = {"temperature": 0}  # the anthropic SDK 2.x has no temperature argument: sent in the body, as agents send it
TOOLS = [{"name": "add", "description": "Add two integers.",
          "input_schema": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}]


@pytest.fixture(scope="module")
def server(policy_server):
    return policy_server


@pytest.fixture(scope="module")
def client(server):
    return anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0)  # the SDK appends /v1/messages


@pytest.fixture(scope="module")
def tokenizer(server):
    return server.app.state.engine.tokenizer


def ids(message) -> tuple[list[int], list[int], list[float]]:
    extra = message.model_extra if hasattr(message, "model_extra") else message
    return extra["prompt_token_ids"], extra["token_ids"], [lp["logprob"] for lp in extra["logprobs"]["content"]]


def chat_prompt(server, body: dict) -> list[int]:
    """The prompt ids ``POST /v1/chat/completions`` gives ``body``."""
    answer = httpx.post(f"{server.base_url}/chat/completions", json={**body, "max_tokens": 1, "return_token_ids": True}, timeout=60)
    assert answer.status_code == 200, answer.text
    return answer.json()["prompt_token_ids"]


def test_a_text_turn_has_exact_ids_logprobs_and_the_chat_prompt(client, server, tokenizer):
    raw = client.messages.with_raw_response.create(model="anything", system="You are terse.", max_tokens=8,
                                                   messages=[{"role": "user", "content": "task: add 3 4"}], extra_body={**IDS, **GREEDY})
    assert raw.headers[POLICY_VERSION_HEADER] == "0"
    message = raw.parse()
    assert message.model == "anything" and message.type == "message" and message.role == "assistant"
    assert message.id.startswith("msg_") and message.model_extra["policy_version"] == 0
    prompt, completion, logprobs = ids(message)
    chat = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "task: add 3 4"}]
    assert prompt == template_prompt_ids(tokenizer, chat) == chat_prompt(server, {"messages": chat})
    assert 1 <= len(completion) <= 8 and len(logprobs) == len(completion) and all(lp <= 0 for lp in logprobs)
    assert message.usage.input_tokens == len(prompt) and message.usage.output_tokens == len(completion)
    (block,) = message.content
    assert block.type == "text"
    cut = len(completion) == 8 and completion[-1] != tokenizer.eos_token_id
    assert message.stop_reason == ("max_tokens" if cut else "end_turn") and message.stop_sequence is None


def test_without_the_token_fields_none_are_sent(client):
    message = client.messages.create(model="m", max_tokens=3, messages=[{"role": "user", "content": "hi"}])
    assert set(message.model_extra) == {"policy_version"}


def test_system_blocks_and_text_blocks_are_joined_as_vllm_joins_them(client, tokenizer):
    message = client.messages.create(
        model="m", max_tokens=2, extra_body=IDS,
        system=[{"type": "text", "text": "Be "}, {"type": "text", "text": "terse.", "cache_control": {"type": "ephemeral"}}],
        messages=[{"role": "user", "content": [{"type": "text", "text": "task: "}, {"type": "text", "text": "add 3 4"}]}],
    )
    expected = [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "task: add 3 4"}]
    assert ids(message)[0] == template_prompt_ids(tokenizer, expected)


def test_a_tool_turn_is_the_same_prompt_as_the_equivalent_chat_completions_call(client, server, tokenizer):
    """tool_use in the assistant turn, tool_result (and more text) in the next user turn, thinking passed over."""
    message = client.messages.create(
        model="m", max_tokens=2, system="Use the add tool.", tools=TOOLS, tool_choice={"type": "auto"}, extra_body=IDS,
        messages=[
            {"role": "user", "content": "task: add 3 4"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "easy", "signature": "s"},
                {"type": "text", "text": "Adding."},
                {"type": "tool_use", "id": "toolu_1", "name": "add", "input": {"a": 3, "b": 4}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "7"}, {"type": "text", "text": "(exact)"}]},
                {"type": "text", "text": "Now say it."},
            ]},
        ],
    )
    chat = {
        "messages": [
            {"role": "system", "content": "Use the add tool."},
            {"role": "user", "content": "task: add 3 4"},
            {"role": "assistant", "content": "Adding.", "tool_calls": [
                {"id": "toolu_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 3, "b": 4}'}}]},
            {"role": "tool", "tool_call_id": "toolu_1", "content": "7\n(exact)"},
            {"role": "user", "content": "Now say it."},
        ],
        "tools": [{"type": "function", "function": {"name": "add", "description": "Add two integers.", "parameters": TOOLS[0]["input_schema"]}}],
    }
    prompt = ids(message)[0]
    assert prompt == chat_prompt(server, chat)
    text = tokenizer.decode(prompt)
    assert '<tool_call>{"name": "add", "arguments": {"a": 3, "b": 4}}</tool_call>' in text and "7\n(exact)" in text
    assert "easy" not in text


def test_a_matched_stop_sequence_is_named(client):
    body = {"model": "m", "max_tokens": 12, "messages": [{"role": "user", "content": "hi"}],
            "extra_body": {**GREEDY, "ignore_eos": True}}  # (vLLM's extra) twelve tokens whatever the model says
    text = client.messages.create(**body).content[0].text
    letters = [c for c in text if c.isascii() and c.isalnum()]
    assert letters, f"the tiny model's greedy reply {text!r} has no letter to stop at"
    stop = letters[-1]
    stopped = client.messages.create(**body, stop_sequences=["\x00never", stop])
    assert (stopped.stop_reason, stopped.stop_sequence) == ("stop_sequence", stop)
    assert stopped.content[0].text == text[: text.index(stop)]


def test_a_stream_has_anthropics_events_and_the_same_message(client):
    body = {"model": "m", "max_tokens": 6, "messages": [{"role": "user", "content": "task: add 3 4"}]}
    whole = client.messages.create(**body, extra_body={**IDS, **GREEDY})
    events = list(client.messages.create(**body, stream=True, extra_body={**IDS, **GREEDY}))
    kinds = [e.type for e in events]
    assert kinds[:2] == ["message_start", "content_block_start"] and kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(kinds[2:-3]) == {"content_block_delta"}
    assert "".join(e.delta.text for e in events if e.type == "content_block_delta") == whole.content[0].text
    delta = events[-2]
    assert delta.delta.stop_reason == whole.stop_reason and delta.usage.output_tokens == whole.usage.output_tokens
    assert ids(delta.model_extra)[:2] == ids(whole)[:2]
    assert ids(delta.model_extra)[2] == pytest.approx(ids(whole)[2], abs=1e-5)
    assert events[0].message.model_extra["policy_version"] == delta.model_extra["policy_version"] == 0

    with client.messages.stream(**body, extra_body=GREEDY) as stream:  # the SDK's helper puts the message together
        final = stream.get_final_message()
    assert final.content[0].text == whole.content[0].text and final.stop_reason == whole.stop_reason


def test_the_async_client(server):
    async def run():
        client = anthropic.AsyncAnthropic(base_url=server.url, api_key="unused", max_retries=0)
        plain = await client.messages.create(model="m", max_tokens=3, messages=[{"role": "user", "content": "hi"}])
        async with client.messages.stream(model="m", max_tokens=3, messages=[{"role": "user", "content": "hi"}]) as stream:
            final = await stream.get_final_message()
        return plain, final

    plain, final = asyncio.run(run())
    assert plain.usage.input_tokens == final.usage.input_tokens and final.stop_reason in ("max_tokens", "end_turn")


def test_raw_sse_names_each_event(server):
    body = {"model": "m", "max_tokens": 3, "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    with httpx.stream("POST", f"{server.url}/v1/messages", json=body, timeout=60) as r:
        text = "".join(r.iter_text())
    for block in text.strip().split("\n\n"):
        name, data = block.split("\n")
        assert name.startswith("event: ") and data.startswith("data: ") and json.loads(data[6:])["type"] == name[7:]
    assert "[DONE]" not in text


USER = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(("body", "param", "words"), [
    ({"messages": USER}, "max_tokens", "required"),
    ({"max_tokens": 3, "messages": []}, "messages", "at least 1"),
    ({"max_tokens": 3, "messages": [{"role": "system", "content": "x"}]}, "messages[0].role", "'user' or 'assistant'"),
    ({"max_tokens": 3, "messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "base64", "data": ""}}]}]},
     "messages[0].content[0]", "'image'"),
    ({"max_tokens": 3, "messages": [{"role": "user", "content": [{"type": "mystery_block"}]}]}, "messages[0].content[0]", "'mystery_block'"),
    ({"max_tokens": 3, "messages": [{"role": "user", "content": [{"type": "tool_use", "name": "f", "input": {}}]}]},
     "messages[0].content[0]", "tool_result blocks in a user message"),
    ({"max_tokens": 3, "messages": [{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t", "content": [{"type": "image", "source": {}}]}]}]},
     "messages[0].content[0].content[0]", "text blocks in a tool_result"),
    ({"max_tokens": 3, "messages": USER, "system": [{"type": "image", "source": {}}]}, "system[0]", "text blocks in system"),
    ({"max_tokens": 3, "messages": USER, "tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools[0]", "custom tools"),
    ({"max_tokens": 3, "messages": USER, "tools": [{"name": "f"}]}, "tools[0].input_schema", "JSON schema"),
    ({"max_tokens": 3, "messages": USER, "tool_choice": {"type": "tool"}}, "tool_choice.name", "required"),
    ({"max_tokens": 3, "messages": USER, "tool_choice": {"type": "sometimes"}}, "tool_choice.type", "auto, any, tool, none"),
    ({"max_tokens": 3, "messages": USER, "top_k": 5}, "top_k", "does not implement top_k"),
    ({"max_tokens": 3, "messages": USER, "thinking": {"type": "enabled", "budget_tokens": 2048}}, "thinking", "extended thinking"),
    ({"max_tokens": 3, "messages": USER, "top_logprobs": 2}, "top_logprobs", "logprobs: true"),
    ({"max_tokens": 10**6, "messages": USER}, "max_tokens", "maximum context length"),
])
def test_what_is_not_served_is_a_400_naming_the_field_in_anthropics_error_shape(server, body, param, words):
    response = httpx.post(f"{server.url}/v1/messages", json={"model": "m", **body}, timeout=60)
    assert response.status_code == 400, response.text
    answer = response.json()
    assert answer["type"] == "error" and answer["error"]["type"] == "invalid_request_error"
    assert answer["error"]["param"] == param and words in answer["error"]["message"], answer


def test_the_sdk_raises_the_servers_message(client):
    with pytest.raises(anthropic.BadRequestError, match=r"tools\[0\] is a 'bash_20250124' tool"):
        client.messages.create(model="m", max_tokens=3, messages=USER, tools=[{"type": "bash_20250124", "name": "bash"}])
