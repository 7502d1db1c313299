"""Exact tokens from the OpenAI client, with the agent seeing what it would see anyway."""

from __future__ import annotations

import asyncio

import openai
import pytest

from tracerl.instrumentation import capture_stats
from tracerl_testing.scripted_server import POLICY_VERSION
from tracerl.schemas import attributes as A
from tracerl.schemas import environment as E
from tracerl.schemas.tokens import decode

TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}]
MESSAGES = [{"role": "user", "content": "What is 2+2?"}]


def llm_spans(spans) -> list:
    return [s for s in spans.get_finished_spans() if s.attributes.get(A.GEN_AI_OPERATION) in ("chat", "text_completion")]


def assert_tokens_match(span, call) -> None:
    assert decode(span.attributes[A.PROMPT_TOKEN_IDS]) == call.prompt_token_ids
    assert decode(span.attributes[A.COMPLETION_TOKEN_IDS]) == call.token_ids
    assert decode(span.attributes[A.COMPLETION_LOGPROBS]) == pytest.approx(call.logprobs)
    assert span.attributes[A.POLICY_VERSION] == POLICY_VERSION
    assert A.TOKEN_IDS_MISSING not in span.attributes


def test_chat_with_tool_call_records_exact_tokens_and_hides_the_extras(spans, server):
    client = openai.OpenAI(base_url=server.base_url, api_key="sk-x")
    reply = client.chat.completions.create(model="m", messages=MESSAGES, tools=TOOLS)

    assert reply.choices[0].message.tool_calls[0].function.name == "lookup"
    assert reply.choices[0].logprobs is None  # the agent did not ask for log-probs
    assert "prompt_token_ids" not in reply.model_extra and "token_ids" not in (reply.choices[0].model_extra or {})
    (call,) = server.calls
    assert call.request[A.VLLM_RETURN_TOKEN_IDS_FIELD] is True and call.request["logprobs"] is True
    (span,) = llm_spans(spans)
    assert_tokens_match(span, call)


def test_log_probs_the_agent_asked_for_are_kept(spans, server):
    client = openai.OpenAI(base_url=server.base_url, api_key="sk-x")
    reply = client.chat.completions.create(model="m", messages=MESSAGES, logprobs=True)
    assert [c.logprob for c in reply.choices[0].logprobs.content] == pytest.approx(server.calls[0].logprobs)


def test_streamed_chat_is_captured_and_the_chunks_are_what_the_agent_expects(spans, server):
    client = openai.OpenAI(base_url=server.base_url, api_key="sk-x")
    chunks = list(client.chat.completions.create(model="m", messages=MESSAGES, stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "done after 1 messages"
    assert all("prompt_token_ids" not in c.model_extra for c in chunks)
    assert all(c.choices[0].logprobs is None and "token_ids" not in (c.choices[0].model_extra or {}) for c in chunks if c.choices)
    (span,) = llm_spans(spans)
    assert_tokens_match(span, server.calls[0])


def test_async_streamed_tool_call_is_captured(spans, server):
    async def main():
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="sk-x")
        stream = await client.chat.completions.create(model="m", messages=MESSAGES, tools=TOOLS, stream=True)
        return [c async for c in stream]

    chunks = asyncio.run(main())
    names = [tc.function.name for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert names == ["lookup"]
    (span,) = llm_spans(spans)
    assert_tokens_match(span, server.calls[0])


def test_async_completions_are_captured(spans, server):
    async def main():
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="sk-x")
        return await client.completions.create(model="m", prompt="2+2=")

    reply = asyncio.run(main())
    assert reply.choices[0].logprobs is None and reply.choices[0].text.startswith("ok:")
    (span,) = llm_spans(spans)
    assert_tokens_match(span, server.calls[0])


@pytest.fixture()
def stats(monkeypatch) -> capture_stats.CaptureStats:
    """A fresh call counter for this test (the process-wide one is left as it was)."""
    fresh = capture_stats.CaptureStats()
    monkeypatch.setattr(capture_stats, "STATS", fresh)
    return fresh


def test_upstream_errors_reach_the_agent_unchanged_and_are_not_counted_as_calls(spans, server, stats):
    client = openai.OpenAI(base_url=server.base_url, api_key="sk-x", max_retries=0)
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        client.chat.completions.create(model="missing-model", messages=MESSAGES)
    assert (stats.with_tokens, sum(stats.missing.values())) == (0, 0)


def test_a_call_without_token_ids_is_marked_and_counted(spans, server, stats, monkeypatch):
    from tracerl.instrumentation import settings as S

    monkeypatch.setenv(E.TOKEN_CAPTURE_ENV, "off")
    S.settings.cache_clear()
    try:
        client = openai.OpenAI(base_url=server.base_url, api_key="sk-x")
        client.chat.completions.create(model="m", messages=MESSAGES)
    finally:
        monkeypatch.delenv(E.TOKEN_CAPTURE_ENV)
        S.settings.cache_clear()
    assert A.VLLM_RETURN_TOKEN_IDS_FIELD not in server.calls[0].request
    (span,) = llm_spans(spans)
    assert A.PROMPT_TOKEN_IDS not in span.attributes
    assert "TRACERL_TOKEN_CAPTURE=off" in span.attributes[A.TOKEN_IDS_MISSING]
    assert (stats.with_tokens, sum(stats.missing.values())) == (0, 1)
    assert "1 of 1 LLM calls have no exact token ids" in stats.report()


def test_hosted_apis_are_never_sent_vllm_fields():
    from tracerl.instrumentation.settings import settings

    assert "hosted API" in settings().why_not_ask_tokens("api.openai.com")
    assert "hosted API" in settings().why_not_ask_tokens("myres.openai.azure.com")
    assert settings().why_not_ask_tokens("127.0.0.1") is None and settings().why_not_ask_tokens("vllm.internal") is None


@pytest.mark.parametrize(("value", "expected"), [(None, "packed"), ("array", "array"), ("packed", "packed")])
def test_tokens_are_packed_unless_arrays_are_asked_for(monkeypatch, value, expected):
    from tracerl.instrumentation import settings as S

    monkeypatch.delenv(E.TOKEN_ENCODING_ENV, raising=False)
    if value is not None:
        monkeypatch.setenv(E.TOKEN_ENCODING_ENV, value)
    S.settings.cache_clear()
    try:
        assert S.settings().token_encoding == expected
    finally:
        monkeypatch.undo()
        S.settings.cache_clear()


def test_plain_int_arrays_on_request_land_in_the_same_columns(captured, server):
    done = captured.tracerl_run(
        "import os, openai\n"
        "openai.OpenAI(base_url=os.environ['BASE_URL']).chat.completions.create(model='m', messages=[{'role': 'user', 'content': 'hi'}])",
        TRACERL_TOKEN_ENCODING="array",
    )
    assert done.returncode == 0, done.stderr
    (call,) = captured.llm_calls()
    assert call["completion_token_ids"] == server.calls[0].token_ids


def test_the_span_is_finished_off_the_calling_thread_yet_records_the_call_as_it_was(spans, server, monkeypatch):
    import json
    import threading
    import time

    from tracerl.instrumentation import openai_hook

    made_on = []
    make_span = openai_hook._Capture._make_span

    def watched(self, *args):
        made_on.append(threading.current_thread().name)
        return make_span(self, *args)

    monkeypatch.setattr(openai_hook._Capture, "_make_span", watched)
    client = openai.OpenAI(base_url=server.base_url, api_key="sk-x")
    messages = [{"role": "user", "content": "What is 2+2?"}]
    started = time.time_ns()
    client.chat.completions.create(model="m", messages=messages)
    returned = time.time_ns()
    messages.append({"role": "assistant", "content": "4"})  # agents grow their history in place
    messages[0]["content"] = "changed after the call"

    (span,) = llm_spans(spans)
    assert json.loads(span.attributes[A.GEN_AI_INPUT_MESSAGES]) == [{"role": "user", "parts": [{"type": "text", "content": "What is 2+2?"}]}]
    assert started <= span.start_time <= span.end_time <= returned  # the call's own times, not the finisher's
    assert made_on == ["tracerl-span-finisher"]
    assert_tokens_match(span, server.calls[0])


def test_suppressed_instrumentation_records_and_asks_nothing(spans, server):
    from opentelemetry.instrumentation.utils import suppress_instrumentation

    client = openai.OpenAI(base_url=server.base_url, api_key="sk-x")
    with suppress_instrumentation():
        client.chat.completions.create(model="m", messages=MESSAGES)
    assert A.VLLM_RETURN_TOKEN_IDS_FIELD not in server.calls[0].request and llm_spans(spans) == []

