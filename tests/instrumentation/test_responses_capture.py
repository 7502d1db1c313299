"""The OpenAI Responses API captured like Chat Completions: the real ``openai`` SDK (and the OpenAI
Agents SDK with its default API) against the real ``tracerl serve`` on loopback, capture switched on
(in this process, or by environment alone under ``tracerl run``), the real pipeline building the
transitions in DuckDB. The truth is what the server returned (recorded server-side)."""

from __future__ import annotations

import asyncio
import json

import openai
import orjson
import pytest

from tracerl.instrumentation.answer_split import split_answer
from tracerl.instrumentation.answer_stream import SSERewriter, StreamTokens
from tracerl.instrumentation.request_plan import Plan
from tracerl.schemas import attributes as A
from tracerl_testing.installed import require_module

from .conftest import ANSWER, CALL, QUESTION, Captured, check_span, texts
from .conftest import SYSTEM as INSTRUCTIONS

TOOLS = [{"type": "function", "name": "add", "description": "Add two integers.",
          "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                         "required": ["a", "b"], "additionalProperties": False}, "strict": True}]


class Served:
    """A ``tracerl serve`` on loopback that remembers every response it made (prompt and completion ids, log-probs)."""

    def __init__(self, running, calls: list[dict]) -> None:
        self.running, self.calls = running, calls
        self.base_url = running.base_url

    def by_id(self) -> dict[str, dict]:
        return {c["id"]: c for c in self.calls}


def serving(model_path=None):
    """A context manager: ``Served`` over ``model_path`` (default: the tiny model)."""
    from contextlib import contextmanager

    from tracerl.trainer.serving import responses_api
    from tracerl.trainer.serving.app import running_server

    @contextmanager
    def run():
        calls: list[dict] = []
        original = responses_api.ResponsesReply._response

        def recording(self, status, output, result=None, final=False):
            body = original(self, status, output, result, final)
            if final and result is not None:
                calls.append({"id": body["id"], "prompt": list(self.prompt), "completion": list(result.token_ids),
                              "logprobs": list(result.logprobs), "version": self.version, "text": result.text})
            return body

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(responses_api.ResponsesReply, "_response", recording)
            with running_server(model_path) as running:
                yield Served(running, calls)

    return run()


@pytest.fixture(scope="module")
def served():
    require_module("tracerl.trainer.serving.app", "pip install torch==2.13.0 && pip install -e '.[train]'")
    with serving() as server:
        yield server


def llm_spans(spans) -> list:
    return [s for s in spans.get_finished_spans() if s.attributes.get(A.LLM_API) == A.LLM_API_RESPONSES]


# ---- answers as servers write them ----------------------------------------------------------
PLAN = Plan("responses", ask=True, strip_token_ids=True, strip_logprobs=False, stream=False)
RAW = "raw_message_tokens"


def answer(**members) -> dict:
    return {"id": "resp_1", "object": "response", "model": "m", "status": "completed",
            "output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "hi"}]}], **members}


@pytest.mark.parametrize(("members", "expected"), [
    # tracerl serve: the completion's entry carries the log-probs
    ({"input_messages": [{"type": RAW, "message": "p", "tokens": [1, 2]}],
      "output_messages": [{"type": RAW, "message": "hi", "tokens": [3, 4], "logprobs": [-0.5, -0.25]}], "policy_version": 2},
     ([1, 2], [3, 4], [-0.5, -0.25], 2)),
    # vLLM 0.32, a non-harmony model, the agent asked for output_text log-probs itself
    ({"input_messages": [{"type": RAW, "message": "p", "tokens": [1, 2]}],
      "output_messages": [{"type": RAW, "message": "hi", "tokens": [3, 4]}],
      "output": [{"type": "message", "content": [{"type": "output_text", "text": "hi", "logprobs": [
          {"token": "h", "logprob": -0.1, "bytes": [], "top_logprobs": []}, {"token": "i", "logprob": -0.2, "bytes": [], "top_logprobs": []}]}]}]},
     ([1, 2], [3, 4], [-0.1, -0.2], None)),
    # vLLM without log-probs: ids only
    ({"input_messages": [{"type": RAW, "message": "p", "tokens": [1]}], "output_messages": [{"type": RAW, "message": "", "tokens": [5]}]},
     ([1], [5], None, None)),
    # several model turns in one response (vLLM's built-in tools): no single transition's ids
    ({"input_messages": [{"type": RAW, "message": "p", "tokens": [1]}],
      "output_messages": [{"type": RAW, "message": "", "tokens": [5]}, {"type": RAW, "message": "", "tokens": [6]}]},
     (None, None, None, None)),
    # a harmony model's messages: no token ids
    ({"input_messages": [{"author": {"role": "user"}, "content": [{"type": "text", "text": "p"}]}], "output_messages": []},
     (None, None, None, None)),
    ({"input_messages": "not a list", "output_messages": 3}, (None, None, None, None)),
    ({}, (None, None, None, None)),
])
def test_the_ids_of_whole_answers_are_cut_out_and_read(members, expected):
    raw = orjson.dumps(answer(**members))
    body, tokens = split_answer(PLAN, raw)
    agent = orjson.loads(body)
    assert "input_messages" not in agent and "output_messages" not in agent
    assert agent == {k: v for k, v in orjson.loads(raw).items() if k not in ("input_messages", "output_messages")}
    read = tokens.read()
    assert (read.prompt_ids, read.completion_ids, read.logprobs, read.policy_version) == expected


def sse(kind: str, **fields) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps({"type": kind, **fields}) + b"\n\n"


def test_a_stream_is_read_from_its_final_event_and_every_event_reaches_the_agent_stripped():
    final = answer(input_messages=[{"type": RAW, "message": "p", "tokens": [1, 2]}],
                   output_messages=[{"type": RAW, "message": "hi", "tokens": [3], "logprobs": [-0.5]}], policy_version=4)
    raw = (sse("response.created", response={**answer(), "status": "in_progress", "output": []})
           + sse("response.output_text.delta", item_id="m", output_index=0, content_index=0, delta='"response": x')
           + sse("response.completed", response=final))
    for cuts in ([], [5, 40, len(raw) - 3]):
        tokens = StreamTokens(Plan("responses", True, True, False, True))
        seen: list[int] = []
        rewriter = SSERewriter(tokens, lambda: seen.append(len(seen)))
        bounds = [0, *cuts, len(raw)]
        out = b"".join(rewriter.rewrite([raw[a:b] for a, b in zip(bounds, bounds[1:])]))
        events = [orjson.loads(line[6:]) for line in out.split(b"\n") if line.startswith(b"data: ")]
        assert [e["type"] for e in events] == ["response.created", "response.output_text.delta", "response.completed"]
        assert "input_messages" not in events[-1]["response"] and events[-1]["response"]["output"] == final["output"]
        assert out.count(b"event: ") == 3
        result = tokens.result()
        assert (result.prompt_ids, result.completion_ids, result.logprobs, result.policy_version) == ([1, 2], [3], [-0.5], 4)
        assert tokens.ended and tokens.finish_reason == "stop" and seen  # recorded at the final event


def test_unknown_items_are_kept_whole_and_function_calls_join_their_message():
    from tracerl.instrumentation.responses_api import input_messages, output_message

    body = {"instructions": "sys", "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "input_image", "image_url": "u"}]},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "let me"}]},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{bad"},
        {"type": "function_call_output", "call_id": "c1", "output": [{"type": "input_text", "text": "r"}]},
    ]}
    assert input_messages(body) == [
        {"role": "system", "parts": [{"type": "text", "content": "sys"}]},
        {"role": "user", "parts": [{"type": "text", "content": "a"}, {"type": "input_image", "image_url": "u"}]},
        {"role": "assistant", "parts": [{"type": "reasoning", "id": "rs_1", "summary": []}]},
        {"role": "assistant", "parts": [{"type": "text", "content": "let me"},
                                        {"type": "tool_call", "id": "c1", "name": "f", "arguments": "{bad"}]},
        {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c1", "response": "r"}]},
    ]
    cut = output_message({"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}, "output": []})
    assert cut == {"role": "assistant", "parts": [], "finish_reason": "length"}


# ---- in this process: sync, async, streamed -------------------------------------------------
def test_a_plain_responses_create_is_one_span_with_the_servers_ids_and_the_agent_sees_none(spans, served):
    client = openai.OpenAI(base_url=served.base_url, api_key="none", max_retries=0)
    reply = client.responses.create(model="tiny", input=QUESTION, instructions=INSTRUCTIONS, max_output_tokens=8, temperature=0)
    assert "input_messages" not in reply.model_extra and "output_messages" not in reply.model_extra
    (span,) = llm_spans(spans)
    check_span(span, served.by_id()[reply.id])
    assert span.name == "chat tiny" and span.attributes[A.GEN_AI_OPERATION] == "chat"
    assert json.loads(span.attributes[A.GEN_AI_INPUT_MESSAGES]) == [
        {"role": "system", "parts": [{"type": "text", "content": INSTRUCTIONS}]},
        {"role": "user", "parts": [{"type": "text", "content": QUESTION}]},
    ]
    assert json.loads(span.attributes[A.GEN_AI_SYSTEM_INSTRUCTIONS]) == [{"type": "text", "content": INSTRUCTIONS}]
    (output,) = json.loads(span.attributes[A.GEN_AI_OUTPUT_MESSAGES])
    assert output["parts"] == [{"type": "text", "content": reply.output_text}]
    assert output["finish_reason"] == ("length" if reply.status == "incomplete" else "stop")
    assert span.attributes[A.GEN_AI_REQUEST_MAX_TOKENS] == 8
    assert span.attributes[A.GEN_AI_USAGE_INPUT_TOKENS] == reply.usage.input_tokens


def test_async_and_streamed_calls_are_captured_alike(spans, served):
    async def run() -> list[str]:
        client = openai.AsyncOpenAI(base_url=served.base_url, api_key="none", max_retries=0)
        plain = await client.responses.create(model="tiny", input="hi", max_output_tokens=5)
        events = [e async for e in await client.responses.create(model="tiny", input="hi", max_output_tokens=5, stream=True)]
        assert "input_messages" not in events[-1].response.model_extra
        return [plain.id, events[-1].response.id]

    ids = asyncio.run(run())
    sync = openai.OpenAI(base_url=served.base_url, api_key="none", max_retries=0)
    with sync.responses.stream(model="tiny", input="hi", max_output_tokens=5) as stream:
        events = list(stream)
    ids.append(events[-1].response.id)
    found = {s.attributes[A.GEN_AI_RESPONSE_ID]: s for s in llm_spans(spans)}
    assert sorted(found) == sorted(ids)
    for response_id in ids:
        check_span(found[response_id], served.by_id()[response_id])
    assert [found[i].attributes[A.GEN_AI_IS_STREAMING] for i in ids] == [False, True, True]
    (output,) = json.loads(found[ids[1]].attributes[A.GEN_AI_OUTPUT_MESSAGES])
    assert output["parts"][0]["content"] == served.by_id()[ids[1]]["text"]


def test_ids_the_agent_asked_for_stay_in_its_answer(spans, served):
    client = openai.OpenAI(base_url=served.base_url, api_key="none", max_retries=0)
    reply = client.responses.create(model="tiny", input="hi", max_output_tokens=3, extra_body={"enable_response_messages": True})
    assert reply.model_extra["output_messages"][0]["tokens"] == served.by_id()[reply.id]["completion"]
    check_span(llm_spans(spans)[0], served.by_id()[reply.id])


def test_a_hosted_api_is_not_asked_for_ids_and_the_call_says_why(spans, monkeypatch):
    """OpenAI itself refuses vLLM's fields: its calls get spans, with the reason they have no ids."""
    import httpx

    def answer(request: httpx.Request) -> httpx.Response:
        assert "enable_response_messages" not in json.loads(request.content)
        return httpx.Response(200, json={"id": "resp_1", "object": "response", "status": "completed", "model": "gpt-x",
                                         "output": [{"type": "function_call", "call_id": "c1", "name": "add", "arguments": "{}",
                                                     "id": "fc_1", "status": "completed"}],
                                         "usage": {"input_tokens": 3, "output_tokens": 2, "total_tokens": 5}})

    client = openai.OpenAI(api_key="sk-x", max_retries=0, http_client=httpx.Client(transport=httpx.MockTransport(answer)))
    client.responses.create(model="gpt-x", input=[{"type": "function_call_output", "call_id": "c0", "output": "4"}],
                            previous_response_id="resp_0")
    (span,) = llm_spans(spans)
    assert "hosted API api.openai.com" in span.attributes[A.TOKEN_IDS_MISSING]
    assert span.attributes[A.PREVIOUS_RESPONSE_ID] == "resp_0"
    assert json.loads(span.attributes[A.GEN_AI_INPUT_MESSAGES]) == [
        {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c0", "response": "4"}]}]
    assert json.loads(span.attributes[A.GEN_AI_OUTPUT_MESSAGES]) == [{"role": "assistant", "finish_reason": "tool_calls", "parts": [
        {"type": "tool_call", "id": "c1", "name": "add", "arguments": "{}"}]}]


def test_hand_written_httpx_calls_are_captured_and_another_services_responses_path_is_left_alone(spans, served):
    import httpx

    with httpx.Client(timeout=60) as client:
        answer = client.post(f"{served.base_url}/responses", json={"model": "tiny", "input": "hi", "max_output_tokens": 3}).json()
    assert "output_messages" not in answer
    (span,) = llm_spans(spans)
    check_span(span, served.by_id()[answer["id"]])

    sent: list[bytes] = []

    def survey(request: httpx.Request) -> httpx.Response:
        sent.append(request.content)
        return httpx.Response(201, json={"ok": True})

    with httpx.Client(transport=httpx.MockTransport(survey)) as client:
        client.post("http://surveys.example/api/responses", json={"survey": 3, "answers": ["yes"]})
    assert json.loads(sent[0]) == {"survey": 3, "answers": ["yes"]}
    assert len(llm_spans(spans)) == 1


def test_the_gateway_records_responses_calls_of_agents_it_cannot_instrument(spans, served):
    import httpx
    from opentelemetry.instrumentation.utils import suppress_instrumentation

    from tracerl.core.uvicorn_thread import serve_in_thread
    from tracerl.instrumentation.gateway import create_gateway_app

    body = {"model": "tiny", "input": QUESTION, "instructions": INSTRUCTIONS, "max_output_tokens": 4}
    with serve_in_thread(create_gateway_app(served.base_url)) as url, suppress_instrumentation():
        whole = httpx.post(f"{url}/v1/responses", json=body, timeout=60).json()
        with httpx.stream("POST", f"{url}/v1/responses", json={**body, "stream": True}, timeout=60) as stream:
            text = "".join(stream.iter_text())
    assert "input_messages" not in whole and "input_messages" not in text
    final = json.loads(text.strip().split("\n\n")[-1].split("data: ", 1)[1])["response"]
    found = {s.attributes[A.GEN_AI_RESPONSE_ID]: s for s in llm_spans(spans)}
    assert sorted(found) == sorted([whole["id"], final["id"]])
    for response_id in found:
        check_span(found[response_id], served.by_id()[response_id])


# ---- agents captured by environment alone, transitions built by the pipeline ---------------------
CHAIN_AGENT = """
    import os
    from openai import OpenAI

    client = OpenAI(base_url=os.environ["BASE_URL"], api_key="none")
    first = client.responses.create(model="tiny", instructions="Be terse.", input="task: add 3 4", max_output_tokens=6, temperature=0)
    second = client.responses.create(model="tiny", instructions="Be exact.", input="task: diff 9 2",
                                     previous_response_id=first.id, max_output_tokens=6, temperature=0)
    third = client.responses.create(model="tiny", input=[{"role": "user", "content": "and max?"}],
                                    previous_response_id=second.id, max_output_tokens=6, temperature=0)
    print(first.id, second.id, third.id)
"""


def test_a_previous_response_id_chain_of_three_turns_becomes_transitions_with_the_whole_conversation(tmp_path, served):
    captured = Captured(tmp_path, served.base_url)
    done = captured.tracerl_run(CHAIN_AGENT, "--episode-id", "ep-chain")
    assert done.returncode == 0, done.stderr[-3000:]
    ids = done.stdout.split()
    truth = [served.by_id()[i] for i in ids]
    rows = captured.llm_calls()
    assert [r["response_id"] for r in rows] == ids
    assert [json.loads(r["attributes"]).get(A.PREVIOUS_RESPONSE_ID) for r in rows] == [None, ids[0], ids[1]]

    transitions, manifest = captured.build("ep-chain")
    assert [t["response_id"] for t in transitions] == ids
    for transition, call in zip(transitions, truth):
        assert transition["prompt_token_ids"] == call["prompt"]
        assert transition["response_token_ids"] == call["completion"]
        assert transition["response_logprobs"] == pytest.approx(call["logprobs"], abs=1e-4)
        assert transition["token_source"] == A.TOKEN_SOURCE_SERVED
    # each prompt holds the earlier turns: in its ids (the server's) and in its messages (the pipeline's)
    last_prompt = served.running.app.state.engine.tokenizer.decode(transitions[2]["prompt_token_ids"])
    assert "task: add 3 4" in last_prompt and "task: diff 9 2" in last_prompt and "Be" not in last_prompt
    assert texts(transitions[2]["input_messages"]) == [
        ("user", "task: add 3 4"), ("assistant", truth[0]["text"]),
        ("user", "task: diff 9 2"), ("assistant", truth[1]["text"]), ("user", "and max?"),
    ]
    assert texts(transitions[1]["input_messages"]) == [
        ("system", "Be exact."), ("user", "task: add 3 4"), ("assistant", truth[0]["text"]), ("user", "task: diff 9 2"),
    ]
    assert manifest["counts"]["llm_calls"]["response_chains"] == {"previous_resolved": 2}


def test_a_chain_captured_without_ids_is_retokenized_to_the_servers_prompts(tmp_path, served):
    """Against a server that gives no ids, the retokenizing path: its prompts need the resolved conversation."""
    captured = Captured(tmp_path, served.base_url)
    done = captured.tracerl_run(CHAIN_AGENT, "--episode-id", "ep-chain", TRACERL_TOKEN_CAPTURE="off")
    assert done.returncode == 0, done.stderr[-3000:]
    truth = [served.by_id()[i] for i in done.stdout.split()]
    assert all(r["prompt_token_ids"] is None for r in captured.llm_calls())

    model = served.running.app.state.engine.model_path
    transitions, manifest = captured.build("ep-chain", retokenize=str(model))
    assert [t["token_source"] for t in transitions] == [A.TOKEN_SOURCE_RETOKENIZED] * 3
    assert [t["prompt_token_ids"] for t in transitions] == [call["prompt"] for call in truth]
    assert manifest["counts"]["llm_calls"]["retokenized"] == 3
    from tracerl.pipeline.doctor import diagnose
    from tracerl.pipeline.options import BuildOptions

    notes = diagnose(captured.data_dir, BuildOptions(retokenize=str(model)))["notes"]
    assert any("3 transition(s) will have token ids rebuilt" in n and "3 x responses" in n for n in notes), notes


def test_a_chain_whose_first_turn_is_missing_keeps_served_ids_and_drops_what_it_cannot_retokenize(tmp_path, served):
    from tracerl.pipeline.response_chains import UNRESOLVED

    captured = Captured(tmp_path, served.base_url)
    agent = """
        import os
        from openai import OpenAI
        from opentelemetry.instrumentation.utils import suppress_instrumentation

        client = OpenAI(base_url=os.environ["BASE_URL"], api_key="none")
        with suppress_instrumentation():  # a turn nobody recorded
            first = client.responses.create(model="tiny", input="task: add 3 4", max_output_tokens=4)
        client.responses.create(model="tiny", input="and 5?", previous_response_id=first.id, max_output_tokens=4)
    """
    assert captured.tracerl_run(agent, "--episode-id", "ep-cut").returncode == 0
    transitions, manifest = captured.build("ep-cut")
    assert len(transitions) == 1 and texts(transitions[0]["input_messages"]) == [("user", "and 5?")]
    assert manifest["counts"]["llm_calls"]["response_chains"] == {"previous_unresolved": 1}
    assert any("no transition of their episode" in note for note in manifest["warnings"])

    (tmp_path / "off").mkdir()
    captured = Captured(tmp_path / "off", served.base_url)
    assert captured.tracerl_run(agent, "--episode-id", "ep-cut", TRACERL_TOKEN_CAPTURE="off").returncode == 0
    transitions, manifest = captured.build("ep-cut", retokenize=str(served.running.app.state.engine.model_path))
    assert transitions == [] and manifest["counts"]["llm_calls"]["skipped"][UNRESOLVED] == 1


# ---- a function tool round trip, with a model taught to call the tool ---------------------------
@pytest.fixture(scope="module")
def tool_server(tool_model):
    """``tracerl serve`` of the model taught the tool exchange, recording the responses it makes."""
    with serving(tool_model) as server:
        yield server


TOOL_AGENT = """
    import json, os
    from openai import OpenAI

    client = OpenAI(base_url=os.environ["BASE_URL"], api_key="none")
    tools = json.loads(os.environ["TOOLS"])
    items = [{"role": "user", "content": "task: add 3 4"}]
    first = client.responses.create(model="tiny", instructions="Use the add tool.", input=items, tools=tools, temperature=0)
    (call,) = [item for item in first.output if item.type == "function_call"]
    arguments = json.loads(call.arguments)
    items += [item.model_dump(exclude_none=True) for item in first.output]
    items.append({"type": "function_call_output", "call_id": call.call_id, "output": str(arguments["a"] + arguments["b"])})
    second = client.responses.create(model="tiny", instructions="Use the add tool.", input=items, tools=tools, temperature=0)
    print(json.dumps({"ids": [first.id, second.id], "answer": second.output_text, "call_id": call.call_id}))
"""


def test_a_function_tool_round_trip_becomes_two_transitions(tmp_path, tool_server):
    captured = Captured(tmp_path, tool_server.base_url)
    done = captured.tracerl_run(TOOL_AGENT, "--episode-id", "ep-tool", TOOLS=json.dumps(TOOLS))
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert result["answer"] == ANSWER
    transitions, _ = captured.build("ep-tool")
    truth = [tool_server.by_id()[i] for i in result["ids"]]
    assert [(t["prompt_token_ids"], t["response_token_ids"]) for t in transitions] == [(c["prompt"], c["completion"]) for c in truth]
    (called,) = json.loads(transitions[0]["output_messages"])
    assert called["finish_reason"] == "tool_calls"
    assert called["parts"] == [{"type": "tool_call", "id": result["call_id"], "name": "add", "arguments": json.dumps(CALL["arguments"])}]
    history = json.loads(transitions[1]["input_messages"])
    assert [m["role"] for m in history] == ["system", "user", "assistant", "tool"]
    assert history[2]["parts"] == called["parts"]
    assert history[3]["parts"] == [{"type": "tool_call_response", "id": result["call_id"], "response": "7"}]


AGENTS_SDK_AGENT = """
    import asyncio

    from agents import Agent, ModelSettings, Runner, function_tool


    @function_tool
    def add(a: int, b: int) -> int:
        \"\"\"Add two integers.\"\"\"
        return a + b


    async def main():
        agent = Agent(name="Calc", instructions="Use the add tool.", tools=[add], model="tiny",
                      model_settings=ModelSettings(temperature=0))
        result = await Runner.run(agent, "task: add 3 4")
        print(result.final_output)


    asyncio.run(main())
"""


@pytest.mark.slow
@pytest.mark.frameworks
def test_the_agents_sdk_on_its_default_api_is_captured_into_transitions(tmp_path, tool_server):
    require_module("agents", "pip install -e '.[frameworks]'")
    start = len(tool_server.calls)
    captured = Captured(tmp_path, tool_server.base_url)
    done = captured.tracerl_run(AGENTS_SDK_AGENT, "--episode-id", "ep-agents")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == ANSWER
    truth = tool_server.calls[start:]
    assert len(truth) == 2
    calls = captured.llm_calls()
    assert [c["response_id"] for c in calls] == [t["id"] for t in truth]
    assert [c["agent_name"] for c in calls] == ["Calc", "Calc"]
    assert "execute_tool add" in [r["name"] for r in captured.rows()]
    transitions, _ = captured.build("ep-agents")
    assert [(t["prompt_token_ids"], t["response_token_ids"]) for t in transitions] == [(c["prompt"], c["completion"]) for c in truth]
    assert [t["agent_name"] for t in transitions] == ["Calc", "Calc"]
    assert "not captured" not in done.stderr
