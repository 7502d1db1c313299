"""The built-in server's Responses API (``POST /v1/responses``, ``GET /v1/responses/{id}``), driven by
the real ``openai`` client: the prompt is the chat template over the conversation (instructions,
items, earlier turns kept for ``previous_response_id``), ``enable_response_messages`` returns its
exact token ids, and a kept response is retrieved as it was made."""

from __future__ import annotations

import asyncio
import json

import httpx
import openai
import pytest

from tracerl.core.chat_template import template_prompt_ids
from tracerl.schemas.attributes import POLICY_VERSION_HEADER
from tracerl.trainer.serving.app import running_server

IDS = {"enable_response_messages": True}


@pytest.fixture(scope="module")
def server(policy_server):
    return policy_server


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def tokenizer(server):
    return server.app.state.engine.tokenizer


def ids(response) -> tuple[list[int], list[int], list[float]]:
    """The prompt's and completion's ids and the log-probs a response carries (enable_response_messages)."""
    extra = response.model_extra if hasattr(response, "model_extra") else response
    (prompt,), (completion,) = extra["input_messages"], extra["output_messages"]
    assert prompt["type"] == completion["type"] == "raw_message_tokens"
    return prompt["tokens"], completion["tokens"], completion["logprobs"]


def test_a_text_input_is_a_user_turn_with_exact_ids_logprobs_and_policy_version(client, tokenizer):
    raw = client.responses.with_raw_response.create(model="anything", input="task: add 3 4", instructions="You are terse.",
                                                    max_output_tokens=8, temperature=0, extra_body=IDS)
    assert raw.headers[POLICY_VERSION_HEADER] == "0"
    reply = raw.parse()
    assert reply.model == "anything" and reply.object == "response" and reply.id.startswith("resp_")
    assert reply.model_extra["policy_version"] == 0
    prompt, completion, logprobs = ids(reply)
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "task: add 3 4"}]
    assert prompt == template_prompt_ids(tokenizer, messages)
    assert 1 <= len(completion) <= 8 and len(logprobs) == len(completion) and all(lp <= 0 for lp in logprobs)
    assert reply.usage.input_tokens == len(prompt) and reply.usage.output_tokens == len(completion)
    (message,) = reply.output
    assert message.type == "message" and message.role == "assistant"
    assert reply.status == ("incomplete" if len(completion) == 8 and completion[-1] != tokenizer.eos_token_id else "completed")
    if reply.status == "incomplete":
        assert reply.incomplete_details.reason == "max_output_tokens"


def test_without_enable_response_messages_no_ids_are_sent(client):
    reply = client.responses.create(model="m", input="hi", max_output_tokens=3)
    assert "input_messages" not in reply.model_extra and "output_messages" not in reply.model_extra


def test_previous_response_id_continues_the_conversation_without_the_earlier_instructions(client, tokenizer):
    first = client.responses.create(model="m", input="task: add 3 4", instructions="Be terse.", max_output_tokens=6,
                                    temperature=0, extra_body=IDS)
    second = client.responses.create(model="m", input="task: diff 9 2", instructions="Be exact.", previous_response_id=first.id,
                                     max_output_tokens=6, temperature=0, extra_body=IDS)
    third = client.responses.create(model="m", input="and max?", previous_response_id=second.id, max_output_tokens=6,
                                    temperature=0, extra_body=IDS)
    assert third.previous_response_id == second.id
    expected = [
        {"role": "user", "content": "task: add 3 4"}, {"role": "assistant", "content": first.output_text},
        {"role": "user", "content": "task: diff 9 2"}, {"role": "assistant", "content": second.output_text},
        {"role": "user", "content": "and max?"},
    ]
    assert ids(third)[0] == template_prompt_ids(tokenizer, expected)
    # the same conversation sent whole, as items, is the same prompt
    items = [
        {"role": "user", "content": "task: add 3 4"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": first.output_text, "annotations": []}]},
        {"role": "user", "content": [{"type": "input_text", "text": "task: diff 9 2"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": second.output_text, "annotations": []}]},
        {"role": "user", "content": "and max?"},
    ]
    whole = client.responses.create(model="m", input=items, max_output_tokens=6, temperature=0, extra_body=IDS)
    assert ids(whole)[0] == ids(third)[0] and ids(whole)[1] == ids(third)[1]


def test_function_calls_and_their_outputs_are_the_chat_tool_turns(client, tokenizer):
    tools = [{"type": "function", "name": "add", "description": "Add two integers.", "strict": True,
              "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}}]
    items = [
        {"role": "user", "content": "task: add 3 4"},
        {"type": "function_call", "call_id": "call_1", "name": "add", "arguments": '{"a": 3, "b": 4}', "id": "fc_1", "status": "completed"},
        {"type": "function_call_output", "call_id": "call_1", "output": "7"},
    ]
    reply = client.responses.create(model="m", input=items, tools=tools, max_output_tokens=4, extra_body=IDS)
    chat = httpx.post(f"{client.base_url}chat/completions", json={
        "messages": [
            {"role": "user", "content": "task: add 3 4"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 3, "b": 4}'}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "7"},
        ],
        "tools": [{"type": "function", "function": {k: tools[0][k] for k in ("name", "description", "parameters")}}],
        "max_tokens": 1, "return_token_ids": True,
    }).json()
    assert ids(reply)[0] == chat["prompt_token_ids"]
    assert '<tool_call>{"name": "add", "arguments": {"a": 3, "b": 4}}</tool_call>' in tokenizer.decode(ids(reply)[0])


def test_output_text_logprobs_when_included(client):
    reply = client.responses.create(model="m", input="hi", max_output_tokens=5, include=["message.output_text.logprobs"],
                                    top_logprobs=2, temperature=0, extra_body=IDS)
    (part,) = reply.output[0].content
    assert [lp.logprob for lp in part.logprobs] == pytest.approx(ids(reply)[2], abs=1e-6)
    assert all(len(lp.top_logprobs) == 2 for lp in part.logprobs)


def test_a_stream_has_openais_events_and_ends_with_the_whole_response(client):
    whole = client.responses.create(model="m", input="task: add 3 4", max_output_tokens=6, temperature=0, extra_body=IDS)
    events = list(client.responses.create(model="m", input="task: add 3 4", max_output_tokens=6, temperature=0, stream=True,
                                          extra_body=IDS))
    kinds = [e.type for e in events]
    assert kinds[:4] == ["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"]
    assert kinds[-4:-1] == ["response.output_text.done", "response.content_part.done", "response.output_item.done"]
    assert kinds[-1] in ("response.completed", "response.incomplete")
    assert [e.sequence_number for e in events] == list(range(len(events)))
    final = events[-1].response
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == final.output_text == whole.output_text
    assert ids(final.model_extra) == ids(whole)[:2] + (pytest.approx(ids(whole)[2], abs=1e-5),)
    assert final.model_extra["policy_version"] == 0


def test_the_stream_helper_and_the_async_client(server):
    async def run():
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="unused", max_retries=0)
        async with client.responses.stream(model="m", input="hi", max_output_tokens=4) as stream:
            events = [event async for event in stream]  # (get_final_response() wants completed: 4 tokens cut it)
        plain = await client.responses.create(model="m", input="hi", max_output_tokens=4)
        return events[-1].response, plain

    final, plain = asyncio.run(run())
    assert final.status in ("completed", "incomplete") and plain.usage.input_tokens == final.usage.input_tokens


def test_a_kept_response_is_retrieved_as_it_was_made_without_its_token_fields(client):
    made = client.responses.create(model="m", input="task: add 3 4", instructions="Be terse.", max_output_tokens=4,
                                   temperature=0, extra_body=IDS)
    raw = client.responses.with_raw_response.retrieve(made.id)
    assert raw.headers[POLICY_VERSION_HEADER] == "0"
    kept = raw.parse()
    assert "input_messages" not in kept.model_extra and "output_messages" not in kept.model_extra  # asked by the create only
    assert kept.model_dump() == made.model_dump(exclude={"input_messages", "output_messages"})
    with client.responses.stream(model="m", input="hi", max_output_tokens=3) as stream:
        final = [event for event in stream][-1].response
    assert client.responses.retrieve(final.id).model_dump() == final.model_dump()


def test_an_unknown_response_id_is_an_openai_404(client):
    with pytest.raises(openai.NotFoundError) as caught:
        client.responses.retrieve("resp_nope")
    assert caught.value.status_code == 404
    assert caught.value.body == {"message": caught.value.body["message"], "type": "invalid_request_error", "param": "response_id",
                                 "code": None}
    assert caught.value.body["message"].startswith("Response with id 'resp_nope' not found.")


@pytest.mark.parametrize(("body", "param", "words"), [
    ({"input": "hi", "previous_response_id": "resp_nope"}, "previous_response_id", "no such response"),
    ({"input": "hi", "tools": [{"type": "web_search"}]}, "tools[0]", "function tools only"),
    ({"input": [{"type": "image_generation_call", "id": "x"}]}, "input[0]", "image_generation_call"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "data:,"}]}]}, "input[0].content[0]", "text-only"),
    ({"input": "hi", "background": True}, "background", "background"),
    ({"input": "hi", "conversation": "conv_1"}, "conversation", "previous_response_id"),
    ({"input": "hi", "prompt": {"id": "pmpt_1"}}, "prompt", "stored prompts"),
    ({}, "input", "input is required"),
    ({"input": "hi", "max_output_tokens": 10**6}, "max_output_tokens", "maximum context length"),
])
def test_what_is_not_served_is_a_400_naming_the_field(server, body, param, words):
    response = httpx.post(f"{server.base_url}/responses", json={"model": "m", **body})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param and words in error["message"]


def test_store_false_is_not_kept_and_the_store_forgets_the_oldest(tmp_path):
    with running_server() as srv:
        srv_client = openai.OpenAI(base_url=srv.base_url, api_key="unused", max_retries=0)
        kept = srv_client.responses.create(model="m", input="hi", max_output_tokens=2)
        unkept = srv_client.responses.create(model="m", input="hi", max_output_tokens=2, store=False)
        srv_client.responses.create(model="m", input="again", previous_response_id=kept.id, max_output_tokens=2)
        with pytest.raises(openai.BadRequestError, match="no such response"):
            srv_client.responses.create(model="m", input="again", previous_response_id=unkept.id, max_output_tokens=2)
        assert srv_client.responses.retrieve(kept.id).id == kept.id
        with pytest.raises(openai.NotFoundError, match="store left on"):
            srv_client.responses.retrieve(unkept.id)
    from tracerl.trainer.serving.responses_api import ResponseStore

    store = ResponseStore(capacity=2)
    store.put("a", None, [{"role": "user", "content": "1"}], {"id": "a"})
    store.put("b", "a", [{"role": "user", "content": "2"}], {"id": "b", "input_messages": [], "output_messages": []})
    assert [m["content"] for m in store.conversation("b")] == ["1", "2"]
    assert store.response("b") == {"id": "b"}
    store.put("c", "b", [{"role": "user", "content": "3"}], {"id": "c"})
    with pytest.raises(Exception, match="no longer kept"):
        store.conversation("c")
    with pytest.raises(Exception, match="'a' not found"):
        store.response("a")


def test_raw_sse_names_each_event(server):
    with httpx.stream("POST", f"{server.base_url}/responses", json={"input": "hi", "max_output_tokens": 3, "stream": True}) as r:
        text = "".join(r.iter_text())
    events = [block.split("\n") for block in text.strip().split("\n\n")]
    for lines in events:
        assert lines[0].startswith("event: ") and lines[1].startswith("data: ")
        assert json.loads(lines[1][6:])["type"] == lines[0][7:]
    assert "[DONE]" not in text
