"""How much context the server serves (`--max-model-len`), and what it does with requests that
do not fit: as vLLM 0.32 does, a max_tokens that only overruns with this prompt is capped to
what fits; a prompt that leaves no room, or a max_tokens beyond the whole context, is a 400."""

from __future__ import annotations

import httpx
import pytest

from tracerl.trainer.serving.app import running_server
from tracerl.trainer.serving.config import EngineConfig
from tracerl.trainer.serving.engine import ContextLengthError

USER = [{"role": "user", "content": "hi"}]
SHORT_CONTEXT = 48


@pytest.fixture(scope="module")
def short_server():
    with running_server(engine_config=EngineConfig(max_model_len=SHORT_CONTEXT)) as server:
        yield server


def _chat(server, **body) -> httpx.Response:
    return httpx.post(f"{server.base_url}/chat/completions", json={"messages": USER, **body}, timeout=60)


def test_tiny_model_serves_agents_that_ask_for_2048_tokens(policy_server):
    """Agents routinely ask for max_tokens=2048: the tiny model's context (4096) takes it. The
    stream's first chunk shows it was admitted; hanging up then stops the generation."""
    assert httpx.get(f"{policy_server.base_url}/models").json()["data"][0]["max_model_len"] == 4096
    body = {"messages": USER, "max_tokens": 2048, "stream": True}
    with httpx.stream("POST", f"{policy_server.base_url}/chat/completions", json=body, timeout=60) as response:
        assert response.status_code == 200
        first = next(line for line in response.iter_lines() if line.startswith("data: "))
    assert '"role":"assistant"' in first.replace(" ", "")


def test_max_model_len_is_what_the_server_reports(short_server):
    assert httpx.get(f"{short_server.base_url}/models").json()["data"][0]["max_model_len"] == SHORT_CONTEXT


def test_max_tokens_that_overruns_with_the_prompt_is_capped_to_what_fits(short_server):
    reply = _chat(short_server, max_tokens=SHORT_CONTEXT, ignore_eos=True, return_token_ids=True)
    assert reply.status_code == 200, reply.text
    body = reply.json()
    prompt = len(body["prompt_token_ids"])
    assert body["usage"]["completion_tokens"] == SHORT_CONTEXT - prompt
    assert body["choices"][0]["finish_reason"] == "length"


@pytest.mark.parametrize("param", ["max_tokens", "max_completion_tokens"])
def test_max_tokens_beyond_the_whole_context_is_refused_with_the_numbers(short_server, param):
    reply = _chat(short_server, **{param: SHORT_CONTEXT + 1})
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert error["param"] == param
    assert f"{param}={SHORT_CONTEXT + 1}" in error["message"]
    assert f"maximum context length of {SHORT_CONTEXT} tokens" in error["message"]
    assert "--max-model-len" in error["message"]


def test_prompt_that_leaves_no_room_is_refused(short_server):
    reply = _chat(short_server, messages=[{"role": "user", "content": "x" * SHORT_CONTEXT}])
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert error["param"] == "messages"
    assert f"maximum context length is {SHORT_CONTEXT} tokens" in error["message"]


def test_max_model_len_beyond_the_models_positions_is_refused():
    with pytest.raises(ContextLengthError, match="max_position_embeddings 4096"):
        with running_server(engine_config=EngineConfig(max_model_len=8192)):
            pass
