"""Anthropic's Messages API captured like Chat Completions: the real ``anthropic`` SDK against the real
``tracerl serve`` on loopback (its ``/v1/messages``), capture switched on (in this process, or by
environment alone under ``tracerl run``), the real pipeline building the transitions in DuckDB. The
truth is what the server returned (recorded server-side).

The SDK sends with httpx2, so the httpx-level hook captures its calls; the SDK's own span of each
call (``anthropic.messages.create``, metadata only) is the parent of tracerl's, and the pipeline
merges the two by response id."""

from __future__ import annotations

import asyncio
import json
from contextlib import contextmanager

import orjson
import pytest

from tracerl.instrumentation.answer_split import split_answer
from tracerl.instrumentation.answer_stream import SSERewriter, StreamTokens
from tracerl.instrumentation.request_plan import Plan, endpoint_kind, is_llm_request, plan_request
from tracerl.schemas import attributes as A
from tracerl_testing.installed import require_module

from .conftest import ANSWER, CALL, QUESTION, SYSTEM, TOOL_REPLY, Captured, check_span, texts

anthropic = require_module("anthropic", "pip install -e '.[frameworks]' (or pip install anthropic)")
pytestmark = pytest.mark.frameworks  # the anthropic SDK comes with the [frameworks] extra

TOOLS = [{"name": "add", "description": "Add two integers.",
          "input_schema": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}]
GREEDY = {"temperature": 0}  # the anthropic SDK 2.x takes no temperature argument: agents send it in the body


class Served:
    """A ``tracerl serve`` on loopback that remembers every message it made (prompt and completion ids, log-probs)."""

    def __init__(self, running, calls: list[dict]) -> None:
        self.running, self.calls = running, calls
        self.url = running.url  # what the Anthropic SDK takes: it appends /v1/messages itself

    def by_id(self) -> dict[str, dict]:
        return {c["id"]: c for c in self.calls}


@contextmanager
def serving(model_path=None):
    from tracerl.trainer.serving import messages_api
    from tracerl.trainer.serving.app import running_server

    calls: list[dict] = []
    original = messages_api.MessagesReply._add_tokens

    def recording(self, holder, result):
        original(self, holder, result)
        calls.append({"id": self.id, "prompt": list(self.prompt), "completion": list(result.token_ids),
                      "logprobs": list(result.logprobs), "version": self.version, "text": result.text})

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(messages_api.MessagesReply, "_add_tokens", recording)
        with running_server(model_path) as running:
            yield Served(running, calls)


@pytest.fixture(scope="module")
def served():
    require_module("tracerl.trainer.serving.app", "pip install torch==2.13.0 && pip install -e '.[train]'")
    with serving() as server:
        yield server


def llm_spans(spans) -> list:
    return [s for s in spans.get_finished_spans() if s.attributes.get(A.LLM_API) == A.LLM_API_MESSAGES]


def client(served, **options):
    return anthropic.Anthropic(base_url=served.url, api_key="none", max_retries=0, **options)


# ---- answers as servers write them ----------------------------------------------------------
def test_messages_paths_and_bodies_are_told_from_other_services():
    assert endpoint_kind("/v1/messages") == "messages" and endpoint_kind("/v1/messages/count_tokens") is None
    assert is_llm_request("messages", {"model": "m", "max_tokens": 3, "messages": []})
    assert not is_llm_request("messages", {"role": "user", "content": "hi"})  # OpenAI's POST /threads/{id}/messages
    plan, body = plan_request("messages", {"model": "m", "messages": [], "max_tokens": 3}, True)
    assert body == {"model": "m", "messages": [], "max_tokens": 3, "return_token_ids": True, "logprobs": True}
    assert (plan.strip_token_ids, plan.strip_logprobs) == (True, True)


PLAN = Plan("messages", ask=True, strip_token_ids=True, strip_logprobs=True, stream=False)
LOGPROBS = {"content": [{"token": "h", "logprob": -0.5, "bytes": [104], "top_logprobs": []},
                        {"token": "i", "logprob": -0.25, "bytes": [105], "top_logprobs": []}]}


def message(**members) -> dict:
    return {"id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": [{"type": "text", "text": "hi"}],
            "stop_reason": "end_turn", "stop_sequence": None, "usage": {"input_tokens": 2, "output_tokens": 2}, **members}


@pytest.mark.parametrize(("members", "expected"), [
    # tracerl serve: ids and chat-shaped log-probs at the top level
    ({"prompt_token_ids": [1, 2], "token_ids": [3, 4], "logprobs": LOGPROBS, "policy_version": 2}, ([1, 2], [3, 4], [-0.5, -0.25], 2)),
    ({"prompt_token_ids": [1, 2], "token_ids": [3, 4]}, ([1, 2], [3, 4], None, None)),
    # vLLM 0.32's /v1/messages: the fields asked for are ignored, none come back
    ({}, (None, None, None, None)),
    ({"prompt_token_ids": "not ids", "token_ids": 3, "logprobs": {"content": "x"}}, ("not ids", 3, None, None)),
])
def test_the_token_fields_of_whole_messages_are_cut_out_and_read(members, expected):
    raw = orjson.dumps(message(**members))
    body, tokens = split_answer(PLAN, raw)
    agent = orjson.loads(body)
    assert agent == message(**{k: v for k, v in members.items() if k == "policy_version"})
    read = tokens.read()
    assert (read.prompt_ids, read.completion_ids, read.logprobs, read.policy_version) == expected


def sse(kind: str, **fields) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps({"type": kind, **fields}) + b"\n\n"


def test_a_stream_is_put_back_together_its_tokens_read_and_every_event_reaches_the_agent_stripped():
    from tracerl.instrumentation import llm_span

    start = {**message(content=[], stop_reason=None), "usage": {"input_tokens": 2, "output_tokens": 0}}
    raw = (sse("message_start", message=start)
           + sse("content_block_start", index=0, content_block={"type": "text", "text": ""})
           + sse("ping")
           + sse("content_block_delta", index=0, delta={"type": "text_delta", "text": "Adding"})
           + sse("content_block_stop", index=0)
           + sse("content_block_start", index=1, content_block={"type": "tool_use", "id": "toolu_1", "name": "add", "input": {}})
           + sse("content_block_delta", index=1, delta={"type": "input_json_delta", "partial_json": '{"a": 3, '})
           + sse("content_block_delta", index=1, delta={"type": "input_json_delta", "partial_json": '"b": 4}'})
           + sse("content_block_stop", index=1)
           + sse("message_delta", delta={"stop_reason": "tool_use", "stop_sequence": None}, usage={"output_tokens": 9},
                 prompt_token_ids=[1, 2], token_ids=[3, 4], logprobs=LOGPROBS, policy_version=4)
           + sse("message_stop"))
    for cuts in ([], [7, 100, len(raw) - 5]):
        tokens = StreamTokens(Plan("messages", True, True, True, True))
        seen: list[int] = []
        rewriter = SSERewriter(tokens, lambda: seen.append(len(seen)))
        bounds = [0, *cuts, len(raw)]
        out = b"".join(rewriter.rewrite([raw[a:b] for a, b in zip(bounds, bounds[1:])]))
        events = [orjson.loads(line[6:]) for line in out.split(b"\n") if line.startswith(b"data: ")]
        assert [e["type"] for e in events] == [e["type"] for e in (orjson.loads(line[6:]) for line in raw.split(b"\n") if line.startswith(b"data: "))]
        assert events[-2] == {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                              "usage": {"output_tokens": 9}, "policy_version": 4}
        assert out.count(b"event: ") == 11
        result = tokens.result()
        assert (result.prompt_ids, result.completion_ids, result.logprobs, result.policy_version) == ([1, 2], [3, 4], [-0.5, -0.25], 4)
        assert tokens.ended and tokens.finish_reason == "tool_calls" and seen  # recorded at message_stop
        attributes = llm_span.stream_attributes(tokens, content=True)
        assert attributes[A.GEN_AI_RESPONSE_ID] == "msg_1" and attributes[A.GEN_AI_RESPONSE_FINISH_REASONS] == ["tool_calls"]
        assert attributes[A.GEN_AI_USAGE_INPUT_TOKENS] == 2 and attributes[A.GEN_AI_USAGE_OUTPUT_TOKENS] == 9
        assert json.loads(attributes[A.GEN_AI_OUTPUT_MESSAGES]) == [{"role": "assistant", "finish_reason": "tool_calls", "parts": [
            {"type": "text", "content": "Adding"}, {"type": "tool_call", "id": "toolu_1", "name": "add", "arguments": '{"a": 3, "b": 4}'}]}]


def test_blocks_map_onto_genai_parts_and_blocks_of_unknown_types_are_kept_whole():
    from tracerl.instrumentation.messages_api import input_messages, output_message, tool_definitions

    body = {"system": [{"type": "text", "text": "Be terse.", "cache_control": {"type": "ephemeral"}}], "messages": [
        {"role": "user", "content": [{"type": "text", "text": "a"},
                                     {"type": "document", "source": {"type": "text", "data": "d"}}]},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "hmm", "signature": "s"}, {"type": "text", "text": "let me"},
            {"type": "tool_use", "id": "t1", "name": "f", "input": {"x": 1}},
            {"type": "server_tool_use", "id": "s1", "name": "web_search", "input": {"query": "q"}},
            {"type": "hologram", "frames": 3}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "is_error": True,
             "content": [{"type": "text", "text": "r"}, {"type": "text", "text": "s"}, {"type": "image", "source": {}}]},
            {"type": "text", "text": "go on"}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t2", "content": "plain"}]},
    ]}
    assert input_messages(body) == [
        {"role": "system", "parts": [{"type": "text", "content": "Be terse."}]},
        {"role": "user", "parts": [{"type": "text", "content": "a"}, {"type": "document", "source": {"type": "text", "data": "d"}}]},
        {"role": "assistant", "parts": [
            {"type": "reasoning", "content": "hmm"}, {"type": "text", "content": "let me"},
            {"type": "tool_call", "id": "t1", "name": "f", "arguments": '{"x": 1}'},
            {"type": "server_tool_use", "id": "s1", "name": "web_search", "input": {"query": "q"}},
            {"type": "hologram", "frames": 3}]},
        {"role": "tool", "parts": [{"type": "tool_call_response", "id": "t1", "response": "r\ns", "is_error": True},
                                   {"type": "image", "source": {}}]},
        {"role": "user", "parts": [{"type": "text", "content": "go on"}]},
        {"role": "tool", "parts": [{"type": "tool_call_response", "id": "t2", "response": "plain"}]},
    ]
    answer = {"content": [{"type": "web_search_tool_result", "tool_use_id": "s1", "content": []}, {"type": "text", "text": "x"}],
              "stop_reason": "pause_turn"}
    assert output_message(answer) == {"role": "assistant", "finish_reason": "pause_turn", "parts": [
        {"type": "web_search_tool_result", "tool_use_id": "s1", "content": []}, {"type": "text", "content": "x"}]}
    assert output_message({"content": [], "stop_reason": "max_tokens"})["finish_reason"] == "length"
    assert tool_definitions([*TOOLS, {"type": "web_search_20250305", "name": "web_search", "max_uses": 2}]) == [
        {"type": "function", "name": "add", "description": "Add two integers.", "parameters": TOOLS[0]["input_schema"]},
        {"type": "web_search_20250305", "name": "web_search", "max_uses": 2}]


# ---- in this process: sync, async, streamed -------------------------------------------------
def test_a_plain_messages_create_is_one_span_with_the_servers_ids_and_the_agent_sees_none(spans, served):
    reply = client(served).messages.create(model="tiny", system=SYSTEM, max_tokens=8, extra_body=GREEDY,
                                           messages=[{"role": "user", "content": QUESTION}])
    assert set(reply.model_extra) == {"policy_version"}  # no token field reached the agent
    (span,) = llm_spans(spans)
    check_span(span, served.by_id()[reply.id])
    assert span.name == "chat tiny" and span.attributes[A.GEN_AI_OPERATION] == "chat"
    assert span.attributes[A.GEN_AI_PROVIDER_NAME] == "anthropic"
    assert json.loads(span.attributes[A.GEN_AI_INPUT_MESSAGES]) == [
        {"role": "system", "parts": [{"type": "text", "content": SYSTEM}]},
        {"role": "user", "parts": [{"type": "text", "content": QUESTION}]},
    ]
    assert json.loads(span.attributes[A.GEN_AI_SYSTEM_INSTRUCTIONS]) == [{"type": "text", "content": SYSTEM}]
    (output,) = json.loads(span.attributes[A.GEN_AI_OUTPUT_MESSAGES])
    assert output["parts"] == [{"type": "text", "content": reply.content[0].text}]
    assert output["finish_reason"] == {"max_tokens": "length", "end_turn": "stop"}[reply.stop_reason]
    assert span.attributes[A.GEN_AI_REQUEST_MAX_TOKENS] == 8 and span.attributes[A.GEN_AI_REQUEST_TEMPERATURE] == 0
    assert span.attributes[A.GEN_AI_USAGE_INPUT_TOKENS] == reply.usage.input_tokens
    # the SDK's own span of the call (metadata only) is its parent, with the same response id
    (sdk,) = [s for s in spans.get_finished_spans() if s.instrumentation_scope.name == A.ANTHROPIC_SDK_SCOPE]
    assert span.parent.span_id == sdk.context.span_id and sdk.attributes[A.GEN_AI_RESPONSE_ID] == reply.id


def test_async_and_streamed_calls_are_captured_alike(spans, served):
    async def run() -> list[str]:
        aclient = anthropic.AsyncAnthropic(base_url=served.url, api_key="none", max_retries=0)
        plain = await aclient.messages.create(model="tiny", max_tokens=5, messages=[{"role": "user", "content": "hi"}])
        events = [e async for e in await aclient.messages.create(model="tiny", max_tokens=5, stream=True,
                                                                 messages=[{"role": "user", "content": "hi"}])]
        assert "token_ids" not in events[-2].model_extra and "prompt_token_ids" not in events[-2].model_extra
        async with aclient.messages.stream(model="tiny", max_tokens=4, messages=[{"role": "user", "content": "yo"}]) as stream:
            streamed = await stream.get_final_message()
        return [plain.id, events[0].message.id, streamed.id]

    ids = asyncio.run(run())
    with client(served).messages.stream(model="tiny", max_tokens=5, messages=[{"role": "user", "content": "hi"}]) as stream:
        final = stream.get_final_message()
    ids.append(final.id)
    found = {s.attributes[A.GEN_AI_RESPONSE_ID]: s for s in llm_spans(spans)}
    assert sorted(found) == sorted(ids)
    for message_id in ids:
        check_span(found[message_id], served.by_id()[message_id])
    assert [found[i].attributes[A.GEN_AI_IS_STREAMING] for i in ids] == [False, True, True, True]
    (output,) = json.loads(found[final.id].attributes[A.GEN_AI_OUTPUT_MESSAGES])
    assert output["parts"] == [{"type": "text", "content": final.content[0].text}] and final.content[0].text == served.by_id()[final.id]["text"]


def test_token_fields_the_agent_asked_for_stay_in_its_answer(spans, served):
    reply = client(served).messages.create(model="tiny", max_tokens=3, messages=[{"role": "user", "content": "hi"}],
                                           extra_body={"return_token_ids": True})
    assert reply.model_extra["token_ids"] == served.by_id()[reply.id]["completion"] and "logprobs" not in reply.model_extra
    check_span(llm_spans(spans)[0], served.by_id()[reply.id])


def test_a_hosted_api_is_not_asked_for_ids_and_the_call_says_why(spans):
    """Anthropic itself refuses fields it does not know: its calls get spans with their blocks, and the reason they have no ids."""
    import httpx2

    def answer(request):
        assert "return_token_ids" not in json.loads(request.content)
        return httpx2.Response(200, json=message(content=[
            {"type": "text", "text": "Let me add."}, {"type": "tool_use", "id": "toolu_9", "name": "add", "input": {"a": 3, "b": 4}}],
            stop_reason="tool_use"))

    hosted = anthropic.Anthropic(api_key="sk-x", max_retries=0, http_client=httpx2.Client(transport=httpx2.MockTransport(answer)))
    hosted.messages.create(model="claude-x", max_tokens=50, tools=TOOLS, messages=[
        {"role": "user", "content": QUESTION},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_8", "name": "add", "input": {"a": 1, "b": 1}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_8", "content": "2"}]},
    ])
    (span,) = llm_spans(spans)
    assert "hosted API api.anthropic.com" in span.attributes[A.TOKEN_IDS_MISSING]
    assert json.loads(span.attributes[A.GEN_AI_INPUT_MESSAGES])[1:] == [
        {"role": "assistant", "parts": [{"type": "tool_call", "id": "toolu_8", "name": "add", "arguments": '{"a": 1, "b": 1}'}]},
        {"role": "tool", "parts": [{"type": "tool_call_response", "id": "toolu_8", "response": "2"}]}]
    assert json.loads(span.attributes[A.GEN_AI_OUTPUT_MESSAGES]) == [{"role": "assistant", "finish_reason": "tool_calls", "parts": [
        {"type": "text", "content": "Let me add."}, {"type": "tool_call", "id": "toolu_9", "name": "add", "arguments": '{"a": 3, "b": 4}'}]}]
    assert json.loads(span.attributes[A.GEN_AI_TOOL_DEFINITIONS]) == [
        {"type": "function", "name": "add", "description": "Add two integers.", "parameters": TOOLS[0]["input_schema"]}]
    assert span.attributes[A.GEN_AI_RESPONSE_FINISH_REASONS] == ["tool_calls"]


def test_a_server_that_gives_no_ids_makes_a_call_without_them_counted_as_such(spans):
    """vLLM 0.32's /v1/messages ignores the fields capture asks for: the call is recorded with its messages, for --retokenize."""
    import httpx2

    asked: list[dict] = []

    def vllm(request):
        asked.append(json.loads(request.content))
        return httpx2.Response(200, json=message(id="chatcmpl-1"))

    local = anthropic.Anthropic(base_url="http://vllm.test:8000", api_key="none", max_retries=0,
                                http_client=httpx2.Client(transport=httpx2.MockTransport(vllm)))
    reply = local.messages.create(model="policy", max_tokens=5, messages=[{"role": "user", "content": "hi"}])
    assert asked[0]["return_token_ids"] is True and asked[0]["logprobs"] is True and reply.content[0].text == "hi"
    (span,) = llm_spans(spans)
    assert span.attributes[A.TOKEN_IDS_MISSING].startswith("server returned no token ids")
    assert json.loads(span.attributes[A.GEN_AI_OUTPUT_MESSAGES])[0]["parts"] == [{"type": "text", "content": "hi"}]


def test_a_block_the_server_does_not_serve_is_its_400_and_a_failed_call_never_a_crash(spans, served):
    with pytest.raises(anthropic.BadRequestError, match=r"messages\[0\]\.content\[1\] is a block of type 'hologram'"):
        client(served).messages.create(model="tiny", max_tokens=3, messages=[
            {"role": "user", "content": [{"type": "text", "text": "look"}, {"type": "hologram", "frames": 3}]}])
    (span,) = llm_spans(spans)
    assert span.status.status_code.name == "ERROR" and "hologram" in span.status.description
    assert json.loads(span.attributes[A.GEN_AI_INPUT_MESSAGES])[0]["parts"][1] == {"type": "hologram", "frames": 3}


def test_openais_assistants_messages_path_is_left_alone(spans):
    import httpx

    sent: list[bytes] = []

    def assistants(request: httpx.Request) -> httpx.Response:
        sent.append(request.content)
        return httpx.Response(200, json={"id": "msg_a", "object": "thread.message"})

    with httpx.Client(transport=httpx.MockTransport(assistants)) as raw:
        raw.post("http://assistants.test/v1/threads/thread_1/messages", json={"role": "user", "content": "hi"})
    assert json.loads(sent[0]) == {"role": "user", "content": "hi"} and llm_spans(spans) == []


COUNTING_AGENT = """
    import json, os
    import anthropic, openai

    asked = [{"role": "user", "content": "task: add 3 4"}]
    claude = anthropic.Anthropic(base_url=os.environ["BASE_URL"].removesuffix("/v1"), api_key="none", max_retries=0)
    counted = claude.messages.count_tokens(model="policy", system="Use the add tool.", messages=asked)
    reply = claude.messages.create(model="policy", system="Use the add tool.", messages=asked, max_tokens=16)
    gpt = openai.OpenAI(base_url=os.environ["BASE_URL"], api_key="none", max_retries=0)
    input_tokens = gpt.responses.input_tokens.count(model="policy", input="task: add 3 4")
    print(json.dumps({"counted": counted.input_tokens, "input_tokens": input_tokens.input_tokens, "id": reply.id}))
"""


def test_counting_tokens_is_no_llm_call_for_capture_nor_for_the_pipeline(captured, server):
    """Anthropic's ``messages.count_tokens`` (POST /v1/messages/count_tokens) and OpenAI's
    ``responses.input_tokens.count`` generate nothing: the server gets the agent's body unchanged (no
    token fields asked for), capture makes no LLM-call span of them, and the Anthropic SDK's own span
    of count_tokens (which names the provider and the model, as on every call the SDK makes) is no LLM
    call for the pipeline: the one call that generated is the episode's only LLM call and transition."""
    done = captured.tracerl_run(COUNTING_AGENT, "--episode-id", "ep-count")
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    asked = [{"role": "user", "content": "task: add 3 4"}]
    counting = [c for c in server.calls if c.path.endswith(("/count_tokens", "/input_tokens"))]
    assert [c.request for c in counting] == [{"model": "policy", "system": "Use the add tool.", "messages": asked},
                                            {"model": "policy", "input": "task: add 3 4"}]
    assert [result["counted"], result["input_tokens"]] == [len(c.prompt_token_ids) for c in counting]
    sdk_spans = {r["name"] for r in captured.rows() if r["scope_name"] == A.ANTHROPIC_SDK_SCOPE}
    assert sdk_spans == {"anthropic.messages.count_tokens", "anthropic.messages.create"}
    (call,) = [r for r in captured.rows() if A.LLM_API in json.loads(r["attributes"])]  # tracerl's LLM-call spans
    assert call["response_id"] == result["id"] and call["prompt_token_ids"] is not None
    rows, manifest = captured.build("ep-count")
    assert manifest["counts"]["llm_calls"]["total"] == 1  # the create's two spans merged by response id; count_tokens none
    assert [row["response_id"] for row in rows] == [result["id"]]


def test_the_gateway_records_messages_calls_of_agents_it_cannot_instrument(spans, served):
    """Whole and streamed, plain HTTP, and the anthropic SDK through an episode-scoped URL (no trace headers of its episode)."""
    import httpx
    from opentelemetry.instrumentation.utils import suppress_instrumentation

    import tracerl
    from tracerl.core.uvicorn_thread import serve_in_thread
    from tracerl.instrumentation.gateway import create_gateway_app

    body = {"model": "tiny", "system": SYSTEM, "max_tokens": 4, "messages": [{"role": "user", "content": QUESTION}]}
    with serve_in_thread(create_gateway_app(served.url)) as url, suppress_instrumentation():
        whole = httpx.post(f"{url}/v1/messages", json=body, timeout=60).json()
        with httpx.stream("POST", f"{url}/v1/messages", json={**body, "stream": True}, timeout=60) as stream:
            text = "".join(stream.iter_text())
        with tracerl.episode(task_id="gw-messages") as ep:
            scoped = ep.base_url(f"{url}/v1").removesuffix("/v1")  # the SDK appends /v1/messages itself
        sdk = anthropic.Anthropic(base_url=scoped, api_key="none", max_retries=0).messages.create(**body)
    assert "token_ids" not in whole and "token_ids" not in text and "prompt_token_ids" not in sdk.model_extra
    streamed = json.loads(text.strip().split("\n\n")[0].split("data: ", 1)[1])["message"]["id"]
    found = {s.attributes[A.GEN_AI_RESPONSE_ID]: s for s in llm_spans(spans)}
    assert sorted(found) == sorted([whole["id"], streamed, sdk.id])
    for message_id in found:
        check_span(found[message_id], served.by_id()[message_id])
    assert found[sdk.id].attributes[A.EPISODE_ID] == ep.episode_id and found[sdk.id].attributes[A.TASK_ID] == "gw-messages"
    assert found[sdk.id].context.trace_id == int(ep.trace_id, 16)
    assert json.loads(found[streamed].attributes[A.GEN_AI_OUTPUT_MESSAGES])[0]["parts"][0]["content"] == served.by_id()[streamed]["text"]


# ---- agents captured by environment alone, transitions built by the pipeline ---------------------
@pytest.fixture(scope="module")
def tool_server(tool_model):
    """``tracerl serve`` of the model taught the tool exchange, recording the messages it makes."""
    with serving(tool_model) as server:
        yield server


TOOL_AGENT = """
    import json, os
    import anthropic

    client = anthropic.Anthropic(base_url=os.environ["BASE_URL"], api_key="none")
    tools = json.loads(os.environ["TOOLS"])
    messages = [{"role": "user", "content": "task: add 3 4"}]
    with client.messages.stream(model="tiny", system="Use the add tool.", messages=messages, tools=tools, max_tokens=64,
                                extra_body={"temperature": 0}) as stream:  # streamed: the tool call comes as input_json_delta
        first = stream.get_final_message()
    (call,) = [block for block in first.content if block.type == "tool_use"]
    messages.append({"role": "assistant", "content": [block.model_dump(exclude_none=True) for block in first.content]})
    messages.append({"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": call.id, "content": str(call.input["a"] + call.input["b"])}]})
    second = client.messages.create(model="tiny", system="Use the add tool.", messages=messages, tools=tools, max_tokens=64,
                                    extra_body={"temperature": 0})
    print(json.dumps({"ids": [first.id, second.id], "answer": second.content[0].text, "call_id": call.id,
                      "stops": [first.stop_reason, second.stop_reason]}))
"""


def test_a_tool_round_trip_becomes_two_transitions_with_the_servers_ids_and_the_earlier_turns(tmp_path, tool_server):
    captured = Captured(tmp_path, tool_server.url)
    done = captured.tracerl_run(TOOL_AGENT, "--episode-id", "ep-tool", TOOLS=json.dumps(TOOLS))
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert result["answer"] == ANSWER and result["stops"] == ["tool_use", "end_turn"]
    truth = [tool_server.by_id()[i] for i in result["ids"]]
    # each call: tracerl's span and the SDK's own, merged by response id
    calls = [r for r in captured.llm_calls() if r["response_id"] in result["ids"]]
    assert len(calls) == 4

    transitions, manifest = captured.build("ep-tool")
    assert [t["response_id"] for t in transitions] == result["ids"]
    for transition, call in zip(transitions, truth):
        assert transition["prompt_token_ids"] == call["prompt"] and transition["response_token_ids"] == call["completion"]
        assert transition["response_logprobs"] == pytest.approx(call["logprobs"], abs=1e-4)
        assert transition["token_source"] == A.TOKEN_SOURCE_SERVED and transition["policy_version"] == 0
    assert manifest["counts"]["llm_calls"]["merged_duplicates"] == 2
    (called,) = json.loads(transitions[0]["output_messages"])
    assert called["finish_reason"] == "tool_calls"
    assert called["parts"] == [{"type": "tool_call", "id": result["call_id"], "name": "add", "arguments": json.dumps(CALL["arguments"])}]
    # the second prompt holds the earlier turns: in its ids (the server's) and in its messages
    history = json.loads(transitions[1]["input_messages"])
    assert [m["role"] for m in history] == ["system", "user", "assistant", "tool"]
    assert history[2]["parts"] == called["parts"]
    assert history[3]["parts"] == [{"type": "tool_call_response", "id": result["call_id"], "response": "7"}]
    assert transitions[1]["prompt_token_ids"][: len(truth[0]["prompt"])] == truth[0]["prompt"]
    assert TOOL_REPLY in tool_server.running.app.state.engine.tokenizer.decode(transitions[1]["prompt_token_ids"])
    (answered,) = json.loads(transitions[1]["output_messages"])
    assert answered == {"role": "assistant", "finish_reason": "stop", "parts": [{"type": "text", "content": ANSWER}]}


CHAT_AGENT = """
    import os
    import anthropic

    client = anthropic.Anthropic(base_url=os.environ["BASE_URL"], api_key="none")
    messages = [{"role": "user", "content": "task: add 3 4"}]
    first = client.messages.create(model="tiny", system="Be terse.", messages=messages, max_tokens=6, extra_body={"temperature": 0})
    messages += [{"role": "assistant", "content": first.content[0].text}, {"role": "user", "content": [{"type": "text", "text": "and 5?"}]}]
    second = client.messages.create(model="tiny", system="Be terse.", messages=messages, max_tokens=6, extra_body={"temperature": 0})
    print(first.id, second.id)
"""


def test_calls_captured_without_ids_take_the_retokenizing_path_to_the_servers_prompts(tmp_path, served):
    """As against vLLM's /v1/messages (no ids): the calls are kept with their messages, and --retokenize
    rebuilds the prompts the server rendered, token for token; doctor says how many, by API."""
    from tracerl.pipeline.doctor import diagnose
    from tracerl.pipeline.options import BuildOptions

    captured = Captured(tmp_path, served.url)
    done = captured.tracerl_run(CHAT_AGENT, "--episode-id", "ep-re", TRACERL_TOKEN_CAPTURE="off")
    assert done.returncode == 0, done.stderr[-3000:]
    truth = [served.by_id()[i] for i in done.stdout.split()]
    assert all(r["prompt_token_ids"] is None for r in captured.llm_calls())

    model = str(served.running.app.state.engine.model_path)
    transitions, manifest = captured.build("ep-re", retokenize=model)
    assert [t["token_source"] for t in transitions] == [A.TOKEN_SOURCE_RETOKENIZED] * 2
    assert [t["prompt_token_ids"] for t in transitions] == [call["prompt"] for call in truth]
    assert texts(transitions[1]["input_messages"]) == [
        ("system", "Be terse."), ("user", "task: add 3 4"), ("assistant", truth[0]["text"]), ("user", "and 5?")]
    assert manifest["counts"]["llm_calls"]["retokenized"] == 2
    notes = diagnose(captured.data_dir, BuildOptions(retokenize=model))["notes"]
    assert any("2 transition(s) will have token ids rebuilt" in n and "2 x messages" in n for n in notes), notes


# ---- an Anthropic-SDK agent with a tool, one round of the training loop --------------------------
LOOP_AGENT = '''
import json, os, sys

import anthropic

import tracerl
from tracerl.instrumentation.agent_env import POLICY_MODEL_NAME

TOOLS = [{"name": "add", "description": "Add two integers.", "input_schema": {
    "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}]
# the loop hands the endpoint as OPENAI_BASE_URL (.../v1); the Anthropic SDK appends /v1/messages itself
client = anthropic.Anthropic(base_url=os.environ["OPENAI_BASE_URL"].removesuffix("/v1"), api_key="loop", max_retries=2)
for line in open(sys.argv[1], encoding="utf-8"):
    task = json.loads(line)
    sampling = {"temperature": task.get("temperature", 1.0), "seed": task.get("seed", 0)}
    with tracerl.episode(task_id=task["task_id"], split=task["split"]):
        messages = [{"role": "user", "content": f"add {task['a']} {task['b']}"}]
        reply = client.messages.create(model=POLICY_MODEL_NAME, max_tokens=12, tools=TOOLS, messages=messages, extra_body=sampling)
        calls = [block for block in reply.content if block.type == "tool_use"]
        if calls:
            messages.append({"role": "assistant", "content": [block.model_dump(exclude_none=True) for block in reply.content]})
            messages.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": call.id, "content": str(task["a"] + task["b"])} for call in calls]})
            reply = client.messages.create(model=POLICY_MODEL_NAME, max_tokens=12, tools=TOOLS, messages=messages, extra_body=sampling)
        text = "".join(block.text for block in reply.content if block.type == "text")
        tracerl.emit_reward(float(str(task["a"] + task["b"]) in text) + 0.1 * (len(text) % 3), name="correct")
print(json.dumps({"ok": True}))
'''


@pytest.mark.slow
def test_an_anthropic_sdk_agent_with_a_tool_trains_for_a_round_of_the_loop(tmp_path):
    """The local loop runs the agent under `tracerl run` against `tracerl serve`; its Messages calls become
    the round's transitions (with the served ids: the trainer's log-probs match the server's) and train v1."""
    import sys

    from tracerl.orchestration.local.config import LocalConfig
    from tracerl.orchestration.local.recipe import AgentRecipe
    from tracerl.orchestration.local.run import run_local
    from tracerl.trainer.tiny_model import build_tiny_model
    from tracerl.trainer.training.config import TrainConfig

    script = tmp_path / "anthropic_agent.py"
    script.write_text(LOOP_AGENT)

    def tasks(seed, data):
        made = [{"task_id": f"add-{a}-{b}", "a": a, "b": b} for a in range(1, 5) for b in range(1, 3)]
        return [{**t, "split": "train"} for t in made[:6]], [{**t, "split": "test"} for t in made[6:]]

    recipe = AgentRecipe(name="anthropic-add", title="Anthropic SDK agent", agent_argv=(sys.executable, str(script)),
                         tasks=tasks, sends_tools=True)
    start = build_tiny_model(tmp_path / "start", seed=1)
    cfg = LocalConfig(out=tmp_path / "run", rounds=1, tasks_per_round=3, group_size=2, eval_tasks=2, seed=0,
                      model=str(start), train=TrainConfig(epochs=1, minibatch_size=8))
    rows = run_local(recipe, cfg)

    assert [r["round"] for r in rows] == [0, 1] and [r["policy_version"] for r in rows] == [0, 1]
    assert rows[0]["transitions"] >= 3 * 2  # a call or two per training episode
    assert rows[0]["served_logprob_gap"] < 1e-3  # the served ids and log-probs are the trainer's
    assert (tmp_path / "run" / "policy" / "v1" / "config.json").exists()
    import duckdb

    ids = duckdb.sql(f"SELECT response_id, token_source FROM read_parquet('{tmp_path}/run/rounds/000/dataset/{A.DATASET_FILES_GLOB}')").fetchall()
    assert len(ids) == rows[0]["transitions"]
    assert all(i.startswith("msg_") and source == A.TOKEN_SOURCE_SERVED for i, source in ids)  # Messages calls, served ids
