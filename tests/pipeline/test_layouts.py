"""Every supported span layout becomes the same LLM-call row; duplicates collapse to one."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from tracerl.cli import app

from tracerl.pipeline import build_dataset, dataset_table
from tracerl.pipeline.messages import chat_messages
from tracerl.schemas import attributes as A
from tracerl_testing.span_builders import episode_span, llm_call, reward_span, span, write_spans


def _raw_call(ep: str, sid: str, start: int, end: int, attrs: dict, prompt=(1, 2), completion=(3,), **kw) -> dict:
    """An LLM span carrying only ``attrs`` (no gen_ai.system/operation) plus token ids."""
    tokens = {A.PROMPT_TOKEN_IDS: list(prompt), A.COMPLETION_TOKEN_IDS: list(completion)}
    return span(ep, sid, "llm", start, end, attrs={**attrs, **tokens}, **kw)


def test_flattened_openllmetry_layout_gives_messages_and_tool_calls(data_dir, tmp_path):
    attrs = {
        "llm.request.type": "chat", "gen_ai.system": "openai",
        "gen_ai.prompt.0.role": "system", "gen_ai.prompt.0.content": "be brief",
        "gen_ai.prompt.1.role": "user", "gen_ai.prompt.1.content": "2+2?",
        "gen_ai.completion.0.role": "assistant", "gen_ai.completion.0.finish_reason": "tool_calls",
        "gen_ai.completion.0.tool_calls.0.name": "calc", "gen_ai.completion.0.tool_calls.0.arguments": '{"e": "2+2"}',
    }
    write_spans(data_dir, [episode_span("e1", 0, 50, task="t"), _raw_call("e1", "c1", 1, 10, attrs),
                           reward_span("e1", "r", 20, 1.0)])
    manifest = build_dataset(data_dir, tmp_path / "out")
    [row] = dataset_table(tmp_path / "out").to_pylist()
    assert json.loads(row["input_messages"]) == [{"role": "system", "content": "be brief"}, {"role": "user", "content": "2+2?"}]
    [out] = json.loads(row["output_messages"])
    assert out["tool_calls"] == [{"id": None, "name": "calc", "arguments": '{"e": "2+2"}'}]
    assert manifest["counts"]["spans"]["content_layouts"] == {"openllmetry": 1}


def test_content_in_the_operation_details_event_gives_messages(data_dir, tmp_path):
    """Instrumentations that keep content off the span's attributes put it on its GenAI event."""
    inputs = [{"role": "user", "parts": [{"type": "text", "content": "2+2?"}]}]
    outputs = [{"role": "assistant", "parts": [{"type": "text", "content": "4"}], "finish_reason": "stop"}]
    details = {"name": A.GEN_AI_OPERATION_DETAILS_EVENT, "time_unix_nano": 9,
               "attributes": {A.GEN_AI_INPUT_MESSAGES: json.dumps(inputs), A.GEN_AI_OUTPUT_MESSAGES: json.dumps(outputs)}}
    other = {"name": "gen_ai.other", "time_unix_nano": 8, "attributes": {A.GEN_AI_INPUT_MESSAGES: "not these"}}
    call = _raw_call("e1", "c1", 1, 10, {A.GEN_AI_OPERATION: "chat", A.GEN_AI_PROVIDER_NAME: "openai"}, events=[other, details])
    write_spans(data_dir, [episode_span("e1", 0, 50, task="t"), call, reward_span("e1", "r", 20, 1.0)])
    manifest = build_dataset(data_dir, tmp_path / "out")
    [row] = dataset_table(tmp_path / "out").to_pylist()
    assert (json.loads(row["input_messages"]), json.loads(row["output_messages"])) == (inputs, outputs)
    assert manifest["counts"]["spans"]["content_layouts"] == {"gen_ai.event": 1}


def test_openinference_layout_gives_messages_and_tool_calls(data_dir, tmp_path):
    attrs = {
        "openinference.span.kind": "LLM",
        "llm.input_messages.0.message.role": "user", "llm.input_messages.0.message.content": "hi",
        "llm.output_messages.0.message.role": "assistant",
        "llm.output_messages.0.message.tool_calls.0.tool_call.id": "call-1",
        "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "search",
        "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments": "{not json",
    }
    write_spans(data_dir, [episode_span("e1", 0, 50, task="t"), _raw_call("e1", "c1", 1, 10, attrs),
                           reward_span("e1", "r", 20, 1.0)])
    manifest = build_dataset(data_dir, tmp_path / "out", advantage="none")
    [row] = dataset_table(tmp_path / "out").to_pylist()
    assert json.loads(row["input_messages"]) == [{"role": "user", "content": "hi"}]
    assert json.loads(row["output_messages"]) == [
        {"role": "assistant", "tool_calls": [{"id": "call-1", "name": "search", "arguments": "{not json"}]}]
    assert manifest["counts"]["spans"]["content_layouts"] == {"openinference": 1}
    # the AIR rule for tool-call arguments that are not JSON finds them in this layout too
    assert manifest["counts"]["rewards"]["by_name"] == {"air.invalid_tool_call": 1, "reward": 1}


def test_detection_by_layout_and_what_is_not_a_call(data_dir, tmp_path):
    rows = [
        episode_span("e1", 0, 100, task="t"),
        _raw_call("e1", "oi", 1, 10, {"openinference.span.kind": "LLM"}),
        _raw_call("e1", "ao", 11, 20, {"agentops.span.kind": "llm"}),
        _raw_call("e1", "gw", 21, 30, {}),  # token ids alone (the tracerl gateway)
        span("e1", "emb", "embeddings", 31, 32, attrs={"llm.request.type": "embedding", "gen_ai.system": "openai"}),
        span("e1", "agt", "invoke_agent a", 33, 34, attrs={A.GEN_AI_OPERATION: "invoke_agent", "gen_ai.system": "openai"}),
        reward_span("e1", "r", 40, 1.0),
    ]
    write_spans(data_dir, rows)
    manifest = build_dataset(data_dir, tmp_path / "out")
    assert manifest["counts"]["llm_calls"]["total"] == 3
    assert [r["step"] for r in dataset_table(tmp_path / "out").to_pylist()] == [0, 1, 2]


def test_agent_name_comes_from_the_enclosing_agent_span(data_dir, tmp_path):
    rows = [
        episode_span("e1", 0, 100, task="t"),
        span("e1", "agent", "invoke_agent writer", 1, 50, attrs={A.GEN_AI_AGENT_NAME: "writer"}),
        llm_call("e1", "c1", 2, 10, [1], [2], parent="agent"),
        reward_span("e1", "r", 60, 1.0),
    ]
    write_spans(data_dir, rows)
    build_dataset(data_dir, tmp_path / "out")
    assert dataset_table(tmp_path / "out").column("agent_name").to_pylist() == ["writer"]


def test_retried_span_and_gateway_copy_are_one_transition(data_dir, tmp_path):
    # the client span (episode known, no token ids) and the gateway span (token ids, its own
    # trace, no episode) describe the same call: same response id
    client = llm_call("e1", "client", 1, 10, None, None, response_id="resp-1")
    gateway = llm_call("e1", "gw", 2, 9, [5, 6], [7], response_id="resp-1", baggage=False, trace="f" * 32)
    rows = [episode_span("e1", 0, 50, task="t"), client, gateway, reward_span("e1", "r", 20, 1.0)]
    write_spans(data_dir, rows)
    write_spans(data_dir, [rows[0], client])  # an exporter retry wrote two spans again
    manifest = build_dataset(data_dir, tmp_path / "out")
    [row] = dataset_table(tmp_path / "out").to_pylist()
    assert (row["episode_id"], row["prompt_token_ids"], row["response_token_ids"]) == ("e1", [5, 6], [7])
    assert row["reward"] == 1.0
    c = manifest["counts"]
    assert c["spans"]["rows"] - c["spans"]["distinct"] == 2
    assert c["llm_calls"]["merged_duplicates"] == 1 and c["llm_calls"]["total"] == 1


def test_chat_messages_reads_both_content_shapes():
    genai = '[{"role":"assistant","parts":[{"type":"text","content":"x="},{"type":"tool_call","name":"f","arguments":{"a":1}}]}]'
    assert chat_messages(genai) == [{"role": "assistant", "content": 'x={"name": "f", "arguments": {"a": 1}}'}]
    assert chat_messages('[{"role":"user","content":"hi"}]') == [{"role": "user", "content": "hi"}]


def test_message_json_cut_by_a_size_limit_is_counted_and_named_and_nothing_else_is_lost(data_dir, tmp_path):
    """One call's messages cut by capture's own limit (its mark at the end), one cut silently by another
    limit (OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT does not mark): both still train, as the whole one does;
    doctor counts and names each kind."""
    whole = json.dumps([{"role": "user", "parts": [{"type": "text", "content": "x" * 80}]}])
    answer = json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": "ok"}]}])
    genai = {A.GEN_AI_OPERATION: "chat", A.GEN_AI_PROVIDER_NAME: "openai", A.GEN_AI_OUTPUT_MESSAGES: answer}
    calls = [_raw_call("e1", "whole", 1, 10, {**genai, A.GEN_AI_INPUT_MESSAGES: whole}),
             _raw_call("e1", "marked", 11, 20, {**genai, A.GEN_AI_INPUT_MESSAGES: whole[:40] + A.TRUNCATED_MARK}),
             _raw_call("e1", "silent", 21, 30, {**genai, A.GEN_AI_INPUT_MESSAGES: whole[:40]})]
    write_spans(data_dir, [episode_span("e1", 0, 50, task="t"), *calls, reward_span("e1", "r", 40, 1.0)])
    manifest = build_dataset(data_dir, tmp_path / "out")
    rows = {row["span_id"]: row for row in dataset_table(tmp_path / "out").to_pylist()}
    assert len(rows) == 3 and rows["marked".ljust(16, "0")]["input_messages"].endswith(A.TRUNCATED_MARK)
    assert manifest["counts"]["spans"]["content_problems"] == {"invalid_json": 1, "truncated": 1}
    report = json.loads(CliRunner().invoke(app, ["pipeline", "doctor", "--spans", str(data_dir), "--json"]).output)
    assert any(n.startswith("1 LLM call(s) whose messages capture cut at its size limit") for n in report["notes"])
    assert any(n.startswith("1 LLM call(s) whose message attributes are not valid JSON") for n in report["notes"])
