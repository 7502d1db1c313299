"""Against tracerl's own policy server with the tiny model (not a scripted one): the
tokens on the span are those the model sampled, streaming or not."""

from __future__ import annotations

import httpx
import openai
import pytest
from opentelemetry.instrumentation.utils import suppress_instrumentation

from tracerl.schemas import attributes as A
from tracerl.schemas.tokens import decode
from tracerl_testing.installed import require_module

MESSAGES = [{"role": "user", "content": "Add 2 and 3."}]


@pytest.fixture(scope="module")
def policy():
    server = require_module("tracerl.trainer.serving.app", "pip install torch==2.13.0 && pip install -e '.[train]'")
    with server.running_server() as running:
        yield running


def greedy_truth(base_url: str) -> dict:
    """What the server itself says, asked directly and uncaptured (greedy decoding is deterministic)."""
    body = {"model": "tiny", "messages": MESSAGES, "max_tokens": 12, "temperature": 0,
            "return_token_ids": True, "logprobs": True}
    with suppress_instrumentation():
        return httpx.post(f"{base_url}/chat/completions", json=body, timeout=60).json()


@pytest.mark.parametrize("stream", [False, True])
def test_captured_tokens_are_the_models_own(spans, policy, stream):
    truth = greedy_truth(policy.base_url)
    client = openai.OpenAI(base_url=policy.base_url, api_key="none")
    reply = client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=12, temperature=0, stream=stream)
    text = "".join(c.choices[0].delta.content or "" for c in reply if c.choices) if stream else reply.choices[0].message.content
    assert text == truth["choices"][0]["message"]["content"]

    (span,) = [s for s in spans.get_finished_spans() if s.attributes.get(A.GEN_AI_OPERATION) == "chat"]
    assert decode(span.attributes[A.PROMPT_TOKEN_IDS]) == truth["prompt_token_ids"]
    assert decode(span.attributes[A.COMPLETION_TOKEN_IDS]) == truth["choices"][0]["token_ids"]
    expected = [item["logprob"] for item in truth["choices"][0]["logprobs"]["content"]]
    assert decode(span.attributes[A.COMPLETION_LOGPROBS]) == pytest.approx(expected, abs=1e-4)
    assert span.attributes[A.POLICY_VERSION] == truth["policy_version"]
