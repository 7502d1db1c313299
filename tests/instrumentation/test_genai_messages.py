"""Capture writes the OpenTelemetry GenAI conventions' shapes: messages as typed parts, tool
definitions flat, ``gen_ai.provider.name`` (and ``gen_ai.system`` until the reader opts in to the
latest names only); and the pipeline reads them back, a malformed tool call included."""

from __future__ import annotations

import json

import pytest

from tracerl.instrumentation import llm_span
from tracerl.instrumentation import settings as S
from tracerl.instrumentation.genai_messages import chat_message, input_messages, output_message, tool_definitions
from tracerl.pipeline.messages import chat_messages
from tracerl.schemas import attributes as A
from tracerl.schemas import environment as E
from tracerl_testing.scripted_server import Reply, running_scripted_server

TOOL_CALL = {"id": "call_1", "type": "function", "function": {"name": "calc", "arguments": '{"expr": "2+2"}'}}


def test_a_tool_loop_in_openai_shapes_becomes_typed_parts():
    history = [
        {"role": "system", "content": "Use tools."},
        {"role": "user", "content": [{"type": "text", "text": "2+2? "}, {"type": "image_url", "image_url": {"url": "data:,"}}]},
        {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL]},
        {"role": "tool", "tool_call_id": "call_1", "content": "4"},
    ]
    assert input_messages("chat", {"messages": history}) == [
        {"role": "system", "parts": [{"type": "text", "content": "Use tools."}]},
        {"role": "user", "parts": [{"type": "text", "content": "2+2? "}, {"type": "image_url", "image_url": {"url": "data:,"}}]},
        {"role": "assistant", "parts": [{"type": "tool_call", "id": "call_1", "name": "calc", "arguments": '{"expr": "2+2"}'}]},
        {"role": "tool", "parts": [{"type": "tool_call_response", "id": "call_1", "response": "4"}]},
    ]


def test_a_completions_prompt_is_one_user_message_and_its_answer_one_assistant_message():
    assert input_messages("completions", {"prompt": "1+1="}) == [{"role": "user", "parts": [{"type": "text", "content": "1+1="}]}]
    assert output_message({"content": "2"}, "stop") == {"role": "assistant", "parts": [{"type": "text", "content": "2"}], "finish_reason": "stop"}


def test_tool_definitions_are_flat():
    tools = [{"type": "function", "function": {"name": "calc", "description": "adds", "parameters": {"type": "object"}}}]
    assert tool_definitions(tools) == [{"type": "function", "name": "calc", "description": "adds", "parameters": {"type": "object"}}]


def test_the_pipeline_reads_back_the_text_the_model_saw():
    messages = [chat_message({"role": "user", "content": "2+2?"}), chat_message({"role": "assistant", "tool_calls": [TOOL_CALL]}),
                chat_message({"role": "tool", "tool_call_id": "call_1", "content": "4"})]
    assert chat_messages(json.dumps(messages)) == [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": '{"name": "calc", "arguments": "{\\"expr\\": \\"2+2\\"}"}'},
        {"role": "tool", "content": "4"},
    ]


@pytest.mark.parametrize(("opt_in", "system"), [(None, "openai"), ("http,gen_ai_latest_experimental", None)])
def test_the_deprecated_system_name_goes_when_the_reader_opts_in_to_the_latest_names(monkeypatch, opt_in, system):
    if opt_in:
        monkeypatch.setenv(E.SEMCONV_STABILITY_OPT_IN_ENV, opt_in)
    S.settings.cache_clear()
    try:
        attributes = llm_span.request_attributes("chat", {"model": "m", "messages": []}, content=False)
    finally:
        S.settings.cache_clear()
    assert (attributes[A.GEN_AI_PROVIDER_NAME], attributes.get(A.GEN_AI_SYSTEM)) == ("openai", system)


AGENT = """
import os, openai
client = openai.OpenAI(base_url=os.environ["BASE_URL"])
tools = [{"type": "function", "function": {"name": "calc", "parameters": {"type": "object"}}}]
client.chat.completions.create(model="m", messages=[{"role": "user", "content": "2+2?"}], tools=tools)
"""


def test_a_tool_call_the_model_wrote_malformed_is_penalised_in_the_dataset(tmp_path):
    """The pipeline's invalid_tool_call rule reads the arguments from capture's own spans."""
    from tests.instrumentation.conftest import Captured

    with running_scripted_server(lambda body: Reply(tool_name="calc", tool_arguments='{"expr": "2+')) as server:
        captured = Captured(tmp_path, server.base_url)
        done = captured.tracerl_run(AGENT, "--task-id", "t1", "--episode-id", "e1")
        assert done.returncode == 0, done.stderr
        [transition], _ = captured.build("e1")
    assert transition["reward"] == pytest.approx(1.0 - 0.1)  # the episode's reward and the rule's penalty on the call that wrote it
