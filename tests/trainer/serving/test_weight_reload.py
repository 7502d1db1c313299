"""Weight reload and tool calls, with a checkpoint trained (real gradient steps) to call a tool.

The tiny model is taught one reply, a hermes tool call, for one question. Loading that
checkpoint into a running server must bump the policy version and change what it says;
the reply must come back as OpenAI ``tool_calls``; and every response must report the
version whose weights produced all of its tokens, even while a reload happens under load.
"""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from tracerl.schemas.attributes import POLICY_VERSION_HEADER
from tracerl.trainer.serving.app import running_server
from tracerl.trainer.tiny_model import ensure_tiny_model

QUESTION = [{"role": "user", "content": "task: add 3 4"}]
CALL = {"name": "add", "arguments": {"a": 3, "b": 4}}
REPLY = "<tool_call>" + json.dumps(CALL) + "</tool_call>"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two integers.",
            "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}},
        },
    }
]


@pytest.fixture(scope="module")
def trained_checkpoint(tmp_path_factory):
    """The tiny model after enough gradient steps to answer QUESTION with REPLY greedily."""
    base = ensure_tiny_model()
    tokenizer = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base)
    prompt = tokenizer.apply_chat_template(QUESTION, add_generation_prompt=True)["input_ids"]
    target = tokenizer(REPLY, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    ids = torch.tensor([prompt + target])
    labels = ids.clone()
    labels[0, : len(prompt)] = -100
    torch.manual_seed(0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny kernels: a second OpenMP thread only spins on a busy machine (13x slower)
    try:
        for _ in range(500):
            loss = model(input_ids=ids, labels=labels).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if loss.item() < 1e-3:  # every token, EOS included, then wins greedily by far
                break
    finally:
        torch.set_num_threads(threads)
    out = tmp_path_factory.mktemp("trained")
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@pytest.fixture()
def server():
    with running_server() as srv:
        yield srv


def _greedy(server, **extra) -> httpx.Response:
    body = {"messages": QUESTION, "max_tokens": 64, "temperature": 0, "return_token_ids": True, **extra}
    return httpx.post(f"{server.base_url}/chat/completions", json=body, timeout=120)


def _load(server, **body) -> httpx.Response:
    return httpx.post(f"{server.base_url}/load_weights", json=body, timeout=120)


def test_load_weights_bumps_the_version_and_changes_the_policy(server, trained_checkpoint):
    before = _greedy(server)
    assert before.json()["policy_version"] == 0
    assert before.json()["choices"][0]["message"]["content"] != REPLY

    assert _load(server, path=str(trained_checkpoint)).json() == {"policy_version": 1}
    after = _greedy(server)
    assert after.headers[POLICY_VERSION_HEADER] == "1"
    assert after.json()["policy_version"] == 1
    assert after.json()["choices"][0]["message"]["content"] == REPLY
    assert httpx.get(f"{server.url}/health").json()["policy_version"] == 1

    assert _load(server, path=str(ensure_tiny_model()), version=7).json() == {"policy_version": 7}
    assert _greedy(server).json()["choices"][0]["token_ids"] == before.json()["choices"][0]["token_ids"]


def test_a_failed_reload_keeps_the_current_policy(server, tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    response = _load(server, path=str(tmp_path))
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "path"
    assert str(tmp_path) in response.json()["error"]["message"]
    assert _greedy(server).json()["policy_version"] == 0


def test_every_response_reports_the_version_that_generated_all_its_tokens(server, trained_checkpoint):
    """Requests keep coming while the weights change; each reply is exact under its own version."""
    references = {
        0: AutoModelForCausalLM.from_pretrained(ensure_tiny_model()).eval(),
        1: AutoModelForCausalLM.from_pretrained(trained_checkpoint).eval(),
    }
    reloaded, stop = threading.Event(), threading.Event()

    def agent(i: int) -> list[dict]:
        """Call the policy until served by the new version (or told to give up)."""
        replies: list[dict] = []
        while not stop.is_set() and not (reloaded.is_set() and replies and replies[-1]["policy_version"] == 1):
            body = {
                "messages": [{"role": "user", "content": f"task: add {i} {len(replies)}"}],
                "max_tokens": 12,
                "logprobs": True,
                "return_token_ids": True,
            }
            replies.append(httpx.post(f"{server.base_url}/chat/completions", json=body, timeout=120).json())
        return replies

    with ThreadPoolExecutor(max_workers=8) as pool:
        futures = [pool.submit(agent, i) for i in range(8)]
        try:
            time.sleep(0.5)
            assert _load(server, path=str(trained_checkpoint)).json() == {"policy_version": 1}
            reloaded.set()
            replies = [r for f in futures for r in f.result()]
        finally:
            stop.set()

    assert {r["policy_version"] for r in replies} == {0, 1}
    for reply in replies:
        choice = reply["choices"][0]
        served = torch.tensor([e["logprob"] for e in choice["logprobs"]["content"]])
        prompt, completion = reply["prompt_token_ids"], choice["token_ids"]
        with torch.no_grad():
            logits = references[reply["policy_version"]](torch.tensor([prompt + completion])).logits[0]
        expected = torch.log_softmax(logits[len(prompt) - 1 : -1], -1).gather(1, torch.tensor(completion)[:, None])[:, 0]
        torch.testing.assert_close(served, expected, atol=1e-4, rtol=0)


@pytest.fixture(scope="module")
def tool_server(trained_checkpoint):
    with running_server(trained_checkpoint) as srv:
        yield srv


@pytest.fixture(scope="module")
def tool_client(tool_server):
    return openai.OpenAI(base_url=tool_server.base_url, api_key="unused")


def test_hermes_reply_becomes_openai_tool_calls(tool_client):
    reply = tool_client.chat.completions.create(model="m", messages=QUESTION, tools=TOOLS, temperature=0, max_tokens=64)
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    [call] = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name == "add"
    assert json.loads(call.function.arguments) == CALL["arguments"]


def test_tool_calls_are_left_as_text_without_tools_or_with_tool_choice_none(tool_client):
    plain = tool_client.chat.completions.create(model="m", messages=QUESTION, temperature=0, max_tokens=64)
    assert plain.choices[0].message.content == REPLY and plain.choices[0].finish_reason == "stop"
    none = tool_client.chat.completions.create(model="m", messages=QUESTION, tools=TOOLS, tool_choice="none", temperature=0, max_tokens=64)
    assert none.choices[0].message.tool_calls is None


def test_streamed_tool_call_arrives_as_a_tool_calls_delta(tool_client):
    chunks = list(
        tool_client.chat.completions.create(
            model="m", messages=QUESTION, tools=TOOLS, temperature=0, max_tokens=64, stream=True, extra_body={"return_token_ids": True}
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert "<tool_call>" not in text and "<tool" not in text
    calls = [call for c in chunks for call in (c.choices[0].delta.tool_calls or [])]
    assert [(call.index, call.function.name) for call in calls] == [(0, "add")]
    assert json.loads(calls[0].function.arguments) == CALL["arguments"]
    assert [c.choices[0].finish_reason for c in chunks if c.choices[0].finish_reason] == ["tool_calls"]


def test_next_turn_prompt_holds_exactly_the_tokens_the_model_generated(tool_client):
    """What the model sampled is what it sees in its context next turn: no re-tokenization drift."""
    first = tool_client.chat.completions.create(
        model="m", messages=QUESTION, tools=TOOLS, temperature=0, max_tokens=64, extra_body={"return_token_ids": True}
    )
    message = first.choices[0].message
    history = QUESTION + [
        {"role": "assistant", "content": None, "tool_calls": [c.model_dump() for c in message.tool_calls]},
        {"role": "tool", "tool_call_id": message.tool_calls[0].id, "content": "7"},
    ]
    second = tool_client.chat.completions.create(
        model="m", messages=history, tools=TOOLS, max_tokens=2, extra_body={"return_token_ids": True}
    )
    generated = first.choices[0].model_extra["token_ids"]
    prompt = second.model_extra["prompt_token_ids"]
    assert prompt[: len(first.model_extra["prompt_token_ids"])] == first.model_extra["prompt_token_ids"]
    start = len(first.model_extra["prompt_token_ids"])
    assert prompt[start : start + len(generated)] == generated
