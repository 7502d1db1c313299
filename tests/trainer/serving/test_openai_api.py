"""The built-in policy server, driven by the real `openai` client and raw HTTP, as agents use it."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import openai
import pytest

from tracerl.schemas.attributes import POLICY_VERSION_HEADER

CHAT = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "task: add 3 4"}]


@pytest.fixture(scope="module")
def server(policy_server):
    return policy_server


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base_url, api_key="unused")


def test_chat_completion_returns_token_ids_logprobs_and_policy_version(server, client):
    raw = client.chat.completions.with_raw_response.create(
        model="anything", messages=CHAT, max_tokens=12, logprobs=True, top_logprobs=3, extra_body={"return_token_ids": True}
    )
    assert raw.headers[POLICY_VERSION_HEADER] == "0"
    reply = raw.parse()
    extra = reply.model_extra
    assert reply.model == "anything"  # unknown names are served and echoed
    assert extra["policy_version"] == 0
    choice = reply.choices[0]
    token_ids = choice.model_extra["token_ids"]
    assert 1 <= len(token_ids) <= 12
    assert reply.usage.prompt_tokens == len(extra["prompt_token_ids"])
    assert reply.usage.completion_tokens == len(token_ids)
    content = choice.logprobs.content
    assert len(content) == len(token_ids)
    for entry in content:
        assert entry.logprob <= 0
        assert len(entry.top_logprobs) == 3
        assert entry.top_logprobs[0].logprob >= entry.top_logprobs[-1].logprob
    assert choice.finish_reason in ("stop", "length")
    if choice.finish_reason == "length":
        assert len(token_ids) == 12


def test_prompt_token_ids_are_the_chat_template_tokens(server, client):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(server.app.state.engine.model_path)
    expected = tokenizer.apply_chat_template(CHAT, add_generation_prompt=True)["input_ids"]
    reply = client.chat.completions.create(model="m", messages=CHAT, max_tokens=1, extra_body={"return_token_ids": True})
    assert reply.model_extra["prompt_token_ids"] == expected


def test_default_model_name_and_models_endpoint(server, client):
    models = client.models.list().data
    assert [m.id for m in models] == [server.app.state.engine.model_path.name]
    reply = httpx.post(f"{server.base_url}/chat/completions", json={"messages": CHAT, "max_tokens": 2}).json()
    assert reply["model"] == models[0].id
    health = httpx.get(f"{server.url}/health")
    assert health.json() == {"status": "ok", "policy_version": 0, "running": 0, "waiting": 0}


def test_greedy_is_deterministic_and_n_gives_independent_samples(client):
    greedy = [
        client.chat.completions.create(model="m", messages=CHAT, max_tokens=10, temperature=0, extra_body={"return_token_ids": True})
        for _ in range(2)
    ]
    assert greedy[0].choices[0].model_extra["token_ids"] == greedy[1].choices[0].model_extra["token_ids"]
    sampled = client.chat.completions.create(model="m", messages=CHAT, max_tokens=10, n=4, temperature=1.0, extra_body={"return_token_ids": True})
    assert [c.index for c in sampled.choices] == [0, 1, 2, 3]
    ids = {tuple(c.model_extra["token_ids"]) for c in sampled.choices}
    assert len(ids) > 1  # 10 tokens from a near-uniform 320-way distribution never repeat 4 times


def test_seed_makes_sampling_reproducible(client):
    def sample(seed):
        reply = client.chat.completions.create(
            model="m", messages=CHAT, max_tokens=10, n=2, temperature=1.0, seed=seed, extra_body={"return_token_ids": True}
        )
        return [c.model_extra["token_ids"] for c in reply.choices]

    assert sample(7) == sample(7)
    assert sample(7) != sample(8)


def test_stop_string_truncates_text_but_reports_the_sampled_ids(server, client):
    # Find some text the model generates greedily, then stop on a piece of it.
    first = client.completions.create(model="m", prompt="task: add 3 4 ; tool:", max_tokens=12, temperature=0, extra_body={"ignore_eos": True})
    text = first.choices[0].text
    stop = text[3:5]
    assert len(stop) == 2
    reply = httpx.post(
        f"{server.base_url}/completions",
        json={"prompt": "task: add 3 4 ; tool:", "max_tokens": 12, "temperature": 0, "stop": [stop], "return_token_ids": True, "ignore_eos": True},
    ).json()
    choice = reply["choices"][0]
    assert choice["finish_reason"] == "stop"
    assert choice["text"] == text[: text.find(stop)]
    assert stop not in choice["text"]
    assert len(choice["token_ids"]) < 12


def test_completions_with_token_id_prompts_and_several_prompts(server):
    reply = httpx.post(
        f"{server.base_url}/completions",
        json={"prompt": [[10, 11, 12], [40, 41]], "max_tokens": 3, "n": 2, "logprobs": 2, "return_token_ids": True, "ignore_eos": True},
    ).json()
    assert [c["index"] for c in reply["choices"]] == [0, 1, 2, 3]
    assert [c["prompt_token_ids"] for c in reply["choices"]] == [[10, 11, 12], [10, 11, 12], [40, 41], [40, 41]]
    for choice in reply["choices"]:
        assert len(choice["token_ids"]) == 3 == len(choice["logprobs"]["token_logprobs"])
        assert choice["logprobs"]["text_offset"][0] == 0
    assert reply["usage"]["prompt_tokens"] == 5
    assert reply["usage"]["completion_tokens"] == 12


def test_streaming_chat_carries_token_ids_logprobs_and_usage(client):
    chunks = list(
        client.chat.completions.create(
            model="m",
            messages=CHAT,
            max_tokens=8,
            stream=True,
            logprobs=True,
            stream_options={"include_usage": True},
            extra_body={"return_token_ids": True},
        )
    )
    assert chunks[0].model_extra["prompt_token_ids"]
    assert chunks[0].choices[0].delta.role == "assistant"
    token_ids = [t for c in chunks if c.choices for t in c.choices[0].model_extra.get("token_ids", [])]
    logprobs = [e.logprob for c in chunks if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    assert len(token_ids) == len(logprobs) >= 1
    assert chunks[-1].usage.completion_tokens == len(token_ids)
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finishes) == 1
    assert all(c.model_extra["policy_version"] == 0 for c in chunks)


def test_streamed_greedy_text_and_ids_match_the_non_streamed_reply(client):
    kwargs = dict(model="m", messages=CHAT, max_tokens=16, temperature=0, extra_body={"return_token_ids": True})
    whole = client.chat.completions.create(**kwargs)
    chunks = list(client.chat.completions.create(stream=True, **kwargs))
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == whole.choices[0].message.content
    streamed_ids = [t for c in chunks for t in c.choices[0].model_extra.get("token_ids", [])]
    assert streamed_ids == whole.choices[0].model_extra["token_ids"]


def test_streaming_completions_over_raw_sse(server):
    with httpx.stream(
        "POST", f"{server.base_url}/completions", json={"prompt": "task:", "max_tokens": 4, "stream": True, "return_token_ids": True, "ignore_eos": True},
    ) as response:
        assert response.headers[POLICY_VERSION_HEADER] == "0"
        lines = [line for line in response.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]
    assert chunks[0]["choices"][0]["prompt_token_ids"] == chunks[0]["prompt_token_ids"]
    assert all("prompt_token_ids" not in c for c in chunks[1:])
    assert sum(len(c["choices"][0]["token_ids"]) for c in chunks) == 4
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"


def test_async_client_many_concurrent_requests(server):
    async def main():
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="unused")
        replies = await asyncio.gather(
            *[
                client.chat.completions.create(
                    model="m",
                    messages=[{"role": "user", "content": f"task: add {i} {i + 1}"}],
                    max_tokens=6,
                    extra_body={"return_token_ids": True},
                )
                for i in range(16)
            ]
        )
        await client.close()
        return replies

    replies = asyncio.run(main())
    assert len({r.id for r in replies}) == 16
    assert all(1 <= len(r.choices[0].model_extra["token_ids"]) <= 6 for r in replies)


def test_a_client_that_drops_a_stream_stops_its_generation(server):
    body = {"messages": CHAT, "max_tokens": 480, "ignore_eos": True, "stream": True}
    with httpx.stream("POST", f"{server.base_url}/chat/completions", json=body) as response:
        lines = response.iter_lines()
        for _ in range(3):
            next(lines)
        assert httpx.get(f"{server.url}/health").json()["running"] == 1
    deadline = time.monotonic() + 1.5  # decoding 480 tokens takes several seconds
    while httpx.get(f"{server.url}/health").json()["running"]:
        assert time.monotonic() < deadline, "the dropped stream is still being decoded"
        time.sleep(0.05)


def test_streamed_text_never_shows_the_stop_string(server, client):
    kwargs = dict(model="m", prompt="task: add 3 4 ; tool:", max_tokens=16, temperature=0, extra_body={"ignore_eos": True})
    text = client.completions.create(**kwargs).choices[0].text
    stop = text[4:6]
    whole = client.completions.create(stop=[stop], **kwargs).choices[0].text
    chunks = list(client.completions.create(stop=[stop], stream=True, **kwargs))
    assert "".join(c.choices[0].text for c in chunks) == whole == text[: text.find(stop)]


def test_async_client_streams(server):
    async def main():
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="unused")
        stream = await client.chat.completions.create(
            model="m", messages=CHAT, max_tokens=5, stream=True, extra_body={"return_token_ids": True}
        )
        ids = [t async for chunk in stream for t in chunk.choices[0].model_extra.get("token_ids", [])]
        await client.close()
        return ids

    assert 1 <= len(asyncio.run(main())) <= 5


def test_create_app_is_a_plain_asgi_app():
    """Mounted without a lifespan (here: httpx's in-process transport), it still serves."""
    from tracerl.trainer.serving.app import create_app

    app = create_app(served_model_name="in-process")

    async def main():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://app") as http:
            return (await http.post("/v1/chat/completions", json={"messages": CHAT, "max_tokens": 2})).json()

    try:
        reply = asyncio.run(main())
    finally:
        app.state.engine.stop()
    assert reply["model"] == "in-process"
    assert reply["usage"]["completion_tokens"] >= 1


def test_continue_final_message_extends_a_prefilled_assistant_turn(server):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(server.app.state.engine.model_path)
    messages = [*CHAT, {"role": "assistant", "content": "answer:"}]
    body = {"messages": messages, "max_tokens": 1, "continue_final_message": True, "return_token_ids": True}
    prompt = httpx.post(f"{server.base_url}/chat/completions", json=body).json()["prompt_token_ids"]
    assert tokenizer.decode(prompt).endswith("<|assistant|>answer:")


def test_a_client_that_times_out_stops_its_generation(server):
    """Agents time out and retry: an abandoned non-streamed call must free its batch slot."""
    body = {"messages": CHAT, "max_tokens": 480, "ignore_eos": True}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{server.base_url}/chat/completions", json=body, timeout=httpx.Timeout(10, read=0.1))
    deadline = time.monotonic() + 1.5  # idle, decoding 480 tokens takes ~0.6 s; busy, several seconds
    while httpx.get(f"{server.url}/health").json()["running"]:
        assert time.monotonic() < deadline, "the abandoned request is still being decoded"
        time.sleep(0.05)


def test_streaming_several_choices_keeps_them_apart(client):
    chunks = list(
        client.chat.completions.create(
            model="m", messages=CHAT, max_tokens=6, n=3, stream=True, seed=3,
            stream_options={"include_usage": True}, extra_body={"return_token_ids": True},
        )
    )
    per_choice: dict[int, list[int]] = {0: [], 1: [], 2: []}
    finished = set()
    for chunk in chunks:
        for choice in chunk.choices:
            per_choice[choice.index] += choice.model_extra.get("token_ids", [])
            if choice.finish_reason:
                finished.add(choice.index)
    assert finished == {0, 1, 2}
    assert all(1 <= len(ids) <= 6 for ids in per_choice.values())
    assert chunks[-1].usage.completion_tokens == sum(len(ids) for ids in per_choice.values())
    whole = client.chat.completions.create(model="m", messages=CHAT, max_tokens=6, n=3, seed=3, extra_body={"return_token_ids": True})
    assert [c.model_extra["token_ids"] for c in whole.choices] == [per_choice[i] for i in range(3)]
