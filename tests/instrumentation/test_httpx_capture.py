"""LLM requests made with httpx directly (LiteLLM's OpenAI-compatible providers, hand-written
clients) are captured like OpenAI SDK calls: one LLM-call span with exact token ids, the
client seeing the answer it would have had."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tracerl.schemas import attributes as A
from tracerl_testing.installed import require

REPO = Path(__file__).resolve().parents[2]
LITELLM_PYTHON = os.environ.get("TRACERL_LITELLM_PYTHON") or str(REPO / ".venv-litellm" / "bin" / "python")
LITELLM_HOW = f"set TRACERL_LITELLM_PYTHON or build {LITELLM_PYTHON} as .ci/run does (litellm, langchain-litellm, openai-agents, tracerl)"

RAW_AGENT = """
    import asyncio, json, os, httpx
    url = os.environ["BASE_URL"] + "/chat/completions"
    messages = [{"role": "user", "content": "hi"}]
    whole = httpx.post(url, json={"model": "m", "messages": messages}).json()
    print("WHOLE", whole["choices"][0]["message"]["content"], whole["choices"][0].get("logprobs"), sorted(whole))

    async def streamed():
        async with httpx.AsyncClient() as client:
            async with client.stream("POST", url, json={"model": "m", "messages": messages, "stream": True}) as answer:
                events = [line[6:] async for line in answer.aiter_lines() if line.startswith("data: {")]
        chunks = [json.loads(e) for e in events]
        assert not any("token_ids" in e for e in events), events  # what the server sends unasked, no more
        assert all(choice["logprobs"] is None for c in chunks for choice in c["choices"]), events
        return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])

    print("STREAMED", asyncio.run(streamed()))
    """


def test_httpx_calls_get_exact_tokens_and_their_clients_the_answer_unchanged(captured, server):
    done = captured.tracerl_run(RAW_AGENT, "--episode-id", "ep-httpx")
    assert done.returncode == 0, done.stderr
    assert "WHOLE done after 1 messages None ['choices', 'created', 'id', 'model', 'object', 'policy_version', 'usage']" in done.stdout
    assert "STREAMED done after 1 messages" in done.stdout
    calls = captured.llm_calls()
    assert len(calls) == len(server.calls) == 2 and server.calls[1].request["stream"] is True
    for row, truth in zip(calls, server.calls):
        assert truth.request[A.VLLM_RETURN_TOKEN_IDS_FIELD] is True
        assert row["prompt_token_ids"] == truth.prompt_token_ids and row["completion_token_ids"] == truth.token_ids
        assert row["completion_logprobs"] == pytest.approx(truth.logprobs) and row["episode_id"] == "ep-httpx"
    assert "2 LLM calls: 2 with exact token ids" in done.stderr and "(2 of captured calls, 0 unrecognised)" in done.stderr


LITELLM_AGENT = """
    import asyncio, os, litellm
    from agents import Agent, Runner, set_tracing_disabled
    from agents.extensions.models.litellm_model import LitellmModel

    base = os.environ["BASE_URL"]
    messages = [{"role": "user", "content": "hi"}]
    for model in ("hosted_vllm/m", "openai/m"):  # LiteLLM's own httpx client; the OpenAI SDK
        print(model, litellm.completion(model=model, api_base=base, api_key="x", messages=messages).choices[0].message.content)

    async def streamed():
        chunks = await litellm.acompletion(model="hosted_vllm/m", api_base=base, api_key="x", messages=messages, stream=True)
        return "".join([c.choices[0].delta.content or "" async for c in chunks])

    print("STREAMED", asyncio.run(streamed()))
    set_tracing_disabled(True)
    agent = Agent(name="rag", instructions="Answer.", model=LitellmModel(model="hosted_vllm/m", base_url=base, api_key="x"))
    print("AGENT", asyncio.run(Runner.run(agent, "hi")).final_output)

    from langchain_litellm import ChatLiteLLM  # LangChain's LiteLLM chat model
    print("LANGCHAIN", ChatLiteLLM(model="hosted_vllm/m", api_base=base, api_key="x").invoke("hi").content)
    """


def test_litellm_calls_get_exact_tokens(captured, server):
    """In LiteLLM's own venv (.ci/run builds it): litellm pins the OpenAI SDK 2.x, this one has 3.x."""
    require(Path(LITELLM_PYTHON).is_file(), "LiteLLM's environment", LITELLM_HOW)
    done = captured.tracerl_run(
        LITELLM_AGENT, "--episode-id", "ep-litellm", python=LITELLM_PYTHON, LITELLM_LOCAL_MODEL_COST_MAP="True"
    )
    assert done.returncode == 0, done.stderr
    assert "STREAMED done after 1 messages" in done.stdout and "AGENT done after 2 messages" in done.stdout
    calls = captured.llm_calls()
    assert "LANGCHAIN done after 1 messages" in done.stdout
    assert len(calls) == len(server.calls) == 5
    for row, truth in zip(calls, server.calls):
        assert row["prompt_token_ids"] == truth.prompt_token_ids and row["completion_token_ids"] == truth.token_ids
    assert calls[3]["agent_name"] == "rag"  # set_tracing_disabled(True) did not lose it
    assert "0 unrecognised" in done.stderr
