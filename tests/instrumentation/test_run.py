"""Capture switched on by environment alone: `tracerl run` and `opentelemetry-instrument`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tracerl.pipeline.doctor import diagnose
from tracerl.pipeline.options import BuildOptions
from tracerl.schemas import attributes as A

AGENT = """
import os, openai
client = openai.OpenAI(base_url=os.environ["BASE_URL"])
tools = [{"type": "function", "function": {"name": "calc", "parameters": {"type": "object", "properties": {"expr": {"type": "string"}}}}}]
messages = [{"role": "user", "content": "2+2?"}]
reply = client.chat.completions.create(model="m", messages=messages, tools=tools)
call = reply.choices[0].message.tool_calls[0]
messages += [reply.choices[0].message.model_dump(exclude_none=True),
             {"role": "tool", "tool_call_id": call.id, "content": "4"}]
final = client.chat.completions.create(model="m", messages=messages, tools=tools)
print("ANSWER", final.choices[0].message.content, final.choices[0].logprobs, sorted(final.model_extra))
"""


def test_tracerl_run_captures_a_tool_loop_with_exact_tokens(captured, server):
    done = captured.tracerl_run(AGENT, "--task-id", "task-7", "--split", "train")
    assert done.returncode == 0, done.stderr
    assert "ANSWER done after 3 messages None ['policy_version']" in done.stdout  # what it sees uncaptured

    calls = captured.llm_calls()
    assert len(calls) == len(server.calls) == 2
    for row, truth in zip(calls, server.calls):
        assert row["prompt_token_ids"] == truth.prompt_token_ids
        assert row["completion_token_ids"] == truth.token_ids
        assert row["completion_logprobs"] == pytest.approx(truth.logprobs)
        assert (row["task_id"], row["split"], row["policy_version"]) == ("task-7", "train", 7)
    assert len({r["episode_id"] for r in calls}) == 1 and calls[0]["episode_id"]


def test_opentelemetry_instrument_with_the_tracerl_exporter_does_the_same(captured, server):
    done = captured.otel_instrument(AGENT)
    assert done.returncode == 0, done.stderr
    calls = captured.llm_calls()
    assert [r["completion_token_ids"] for r in calls] == [c.token_ids for c in server.calls]
    assert all(r["episode_id"] is None for r in calls)  # no episode: the pipeline uses the trace


def test_openllmetry_can_make_the_llm_spans_instead_and_gets_the_tokens(captured, server):
    done = captured.tracerl_run(AGENT, TRACERL_LLM_SPANS="openllmetry")
    assert done.returncode == 0, done.stderr
    calls = captured.llm_calls()
    assert [r["scope_name"] for r in calls] == ["opentelemetry.instrumentation.openai.v1"] * 2
    assert [r["completion_token_ids"] for r in calls] == [c.token_ids for c in server.calls]


def test_tracerls_own_llm_spans_describe_the_call(captured, server):
    done = captured.tracerl_run(AGENT)
    assert done.returncode == 0, done.stderr
    first, second = captured.llm_calls()
    assert (first["name"], first["scope_name"], first["kind"]) == ("chat m", "tracerl", "CLIENT")
    attrs = json.loads(first["attributes"])
    assert attrs[A.GEN_AI_RESPONSE_FINISH_REASONS] == ["tool_calls"]
    assert (attrs[A.GEN_AI_PROVIDER_NAME], attrs[A.GEN_AI_SYSTEM], attrs[A.GEN_AI_OPERATION]) == ("openai", "openai", "chat")
    # messages and tools in the GenAI conventions' shapes: typed parts, flat tool definitions
    assert json.loads(attrs[A.GEN_AI_INPUT_MESSAGES]) == [{"role": "user", "parts": [{"type": "text", "content": "2+2?"}]}]
    [output] = json.loads(attrs[A.GEN_AI_OUTPUT_MESSAGES])
    [call] = output["parts"]
    assert (output["role"], output["finish_reason"], call["type"], call["name"]) == ("assistant", "tool_calls", "tool_call", "calc")
    assert isinstance(call["arguments"], str)  # the JSON text the model wrote, kept as written
    assert json.loads(attrs[A.GEN_AI_TOOL_DEFINITIONS]) == [
        {"type": "function", "name": "calc", "parameters": {"type": "object", "properties": {"expr": {"type": "string"}}}}]
    assert attrs[A.GEN_AI_USAGE_OUTPUT_TOKENS] == len(server.calls[0].token_ids)
    tool_result = json.loads(json.loads(second["attributes"])[A.GEN_AI_INPUT_MESSAGES])[-1]
    assert tool_result == {"role": "tool", "parts": [{"type": "tool_call_response", "id": call["id"], "response": "4"}]}
    assert second["response_id"].startswith("chatcmpl-")


def test_the_exit_status_of_the_command_is_passed_through(captured):
    done = captured.tracerl_run("import sys; sys.exit(3)")
    assert done.returncode == 3


def test_calls_without_token_ids_are_reported_at_exit(captured):
    done = captured.tracerl_run(AGENT, TRACERL_TOKEN_CAPTURE="off")
    assert done.returncode == 0, done.stderr
    assert "2 of 2 LLM calls have no exact token ids" in done.stderr
    assert all(r["prompt_token_ids"] is None for r in captured.llm_calls())


def test_a_missing_command_is_a_clear_error(tmp_path: Path):
    tracerl = str(Path(sys.executable).parent / "tracerl")
    done = subprocess.run([tracerl, "run", "--data-dir", str(tmp_path), "--", "no-such-program-xyz"], capture_output=True, text=True)
    assert done.returncode == 127 and "command not found: 'no-such-program-xyz'" in done.stderr
    done = subprocess.run([tracerl, "run"], capture_output=True, text=True, env={**os.environ, "COLUMNS": "300"})
    assert done.returncode == 2 and "give the command to run after `--`" in done.stderr


def test_spans_can_go_over_otlp_to_a_collector_with_packed_tokens(captured, server, collector, tmp_path, parquet_spans):
    done = captured.tracerl_run(AGENT, "--otlp", f"{collector.http_url()}/v1/traces", "--task-id", "otlp-1")
    assert done.returncode == 0, done.stderr
    assert not captured.rows()  # nothing went to the embedded Parquet sink
    deadline = time.monotonic() + 30
    while len(calls := [r for r in parquet_spans(tmp_path / "collected") if r["request_model"]]) < 2:
        assert time.monotonic() < deadline, "spans did not reach the collector"
        time.sleep(0.2)
    assert [r["completion_token_ids"] for r in calls] == [c.token_ids for c in server.calls]
    assert {r["task_id"] for r in calls} == {"otlp-1"}


def test_the_exit_summary_says_where_spans_went_and_counts_http_spans_apart(captured):
    done = captured.tracerl_run(AGENT)
    assert done.returncode == 0, done.stderr
    rows = captured.rows()
    transport = [r for r in rows if json.loads(r["attributes"]).get(A.HTTP_LLM_REQUEST) == A.HTTP_LLM_REQUEST_CAPTURED]
    assert [r["kind"] for r in transport] == ["CLIENT", "CLIENT"]  # the two calls' HTTP client spans
    assert (
        f"tracerl: {len(rows)} spans to {captured.data_dir / 'spans'}; 2 LLM calls: 2 with exact token ids, "
        "0 without, 0 failed; 2 HTTP client spans of LLM requests (2 of captured calls, 0 unrecognised)"
    ) in done.stderr

    done = captured.tracerl_run(AGENT, "--no-http-spans")
    assert done.returncode == 0, done.stderr
    assert "2 LLM calls: 2 with exact token ids" in done.stderr and "0 HTTP client spans" in done.stderr
    assert len(captured.rows()) == len(rows) + 2  # the second run adds its two LLM spans, no HTTP span


def test_an_llm_request_no_hook_recognises_is_named_at_exit_with_the_fix(captured, server):
    done = captured.tracerl_run(
        """
        import os, httpx
        # a body sent as a stream: no hook reads it, so none can ask for token ids
        body = iter([b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'])
        httpx.post(os.environ["BASE_URL"] + "/chat/completions", content=body, headers={"content-type": "application/json"})
        """,
        "--episode-id", "ep-raw",
    )
    assert done.returncode == 0, done.stderr
    assert len(server.calls) == 1 and not captured.llm_calls()
    (http,) = captured.rows()
    assert json.loads(http["attributes"])[A.HTTP_LLM_REQUEST] == A.HTTP_LLM_REQUEST_UNRECOGNISED
    assert f"1 LLM requests were seen only as HTTP client spans, with no LLM-call span or token ids (1 x POST {server.base_url}/chat/completions)" in done.stderr
    assert "point the client at `tracerl gateway`" in done.stderr
    (note,) = [n for n in diagnose(captured.data_dir, BuildOptions())["notes"] if "seen only as HTTP client spans" in n]
    assert f"1 x POST {server.base_url}/chat/completions" in note
