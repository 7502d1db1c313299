"""`tracerl gateway`: a recording reverse proxy for agents that cannot be instrumented.

The agent here is plain HTTP (as an agent in another language would be)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from opentelemetry import propagate
from opentelemetry.instrumentation.utils import suppress_instrumentation

import tracerl
from tracerl.instrumentation.gateway import create_gateway_app
from tracerl.core.net import free_port
from tracerl.schemas import attributes as A
from tracerl.schemas.tokens import decode
from tracerl.core.uvicorn_thread import serve_in_thread

BODY = {"model": "m", "messages": [{"role": "user", "content": "2+2?"}]}
SECRET = "sk-gateway-SECRET-0123456789abcdef"


@pytest.fixture(autouse=True)
def uninstrumented_agent():
    """The agents in front of the gateway are ones tracerl cannot instrument: this process's
    own requests (which tracerl's httpx hook would capture) are not recorded."""
    with suppress_instrumentation():
        yield


@pytest.fixture()
def gateway(server):
    with serve_in_thread(create_gateway_app(server.base_url)) as url:
        yield f"{url}/v1"


def llm_span(spans):
    (span,) = [s for s in spans.get_finished_spans() if s.attributes.get(A.GEN_AI_OPERATION) == "chat"]
    return span


def without_volatile(body: dict) -> dict:
    return {k: v for k, v in body.items() if k not in ("id", "created")}


def test_a_call_is_recorded_with_exact_tokens_and_answered_as_upstream_would(spans, server, gateway):
    with tracerl.episode(task_id="gw-1") as ep:
        headers = {"Authorization": f"Bearer {SECRET}"}
        propagate.inject(headers)  # what an instrumented agent in any language sends
    proxied = httpx.post(f"{gateway}/chat/completions", json=BODY, headers=headers)
    direct = httpx.post(f"{server.base_url}/chat/completions", json=BODY)

    assert proxied.status_code == 200
    assert without_volatile(proxied.json()) == without_volatile(direct.json())
    assert proxied.headers[A.POLICY_VERSION_HEADER] == "7"
    span = llm_span(spans)
    truth = server.calls[0]
    assert truth.request[A.VLLM_RETURN_TOKEN_IDS_FIELD] is True
    assert decode(span.attributes[A.PROMPT_TOKEN_IDS]) == truth.prompt_token_ids
    assert decode(span.attributes[A.COMPLETION_TOKEN_IDS]) == truth.token_ids
    assert span.attributes[A.EPISODE_ID] == ep.episode_id and span.attributes[A.TASK_ID] == "gw-1"
    assert "2+2?" in span.attributes[A.GEN_AI_INPUT_MESSAGES]
    assert SECRET not in json.dumps(dict(span.attributes))


def test_streaming_passes_through_and_is_recorded(spans, server, gateway):
    with httpx.stream("POST", f"{gateway}/chat/completions", json={**BODY, "stream": True}) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [line for line in response.iter_lines() if line.startswith("data:")]
    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(e[5:]) for e in events[:-1]]
    assert all("prompt_token_ids" not in c and "token_ids" not in c["choices"][0] for c in chunks)
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert text == "done after 1 messages"
    span = llm_span(spans)
    assert decode(span.attributes[A.COMPLETION_TOKEN_IDS]) == server.calls[0].token_ids
    assert span.attributes[A.GEN_AI_RESPONSE_ID] == chunks[0]["id"]


def test_upstream_errors_pass_through_unchanged(spans, server, gateway):
    body = {**BODY, "model": "missing-model"}
    proxied = httpx.post(f"{gateway}/chat/completions", json=body)
    direct = httpx.post(f"{server.base_url}/chat/completions", json=body)
    assert (proxied.status_code, proxied.json()) == (direct.status_code, direct.json()) == (404, direct.json())
    assert llm_span(spans).status.status_code.name == "ERROR"


def test_other_endpoints_are_proxied_verbatim(server, gateway):
    assert httpx.get(f"{gateway}/models").json() == httpx.get(f"{server.base_url}/models").json()


def test_an_unreachable_upstream_is_a_502_that_names_it(spans):
    with serve_in_thread(create_gateway_app("http://127.0.0.1:9")) as url:
        response = httpx.post(f"{url}/v1/chat/completions", json=BODY)
    assert response.status_code == 502 and "127.0.0.1:9" in response.json()["error"]["message"]


def test_the_cli_gateway_writes_spans_to_parquet(tmp_path: Path, server, parquet_spans):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "TRACERL_"))}
    tracerl_bin = str(Path(sys.executable).parent / "tracerl")
    command = [tracerl_bin, "gateway", "--upstream", server.base_url, "--port", str(port), "--data-dir", str(tmp_path)]
    process = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                response = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=BODY)
                break
            except httpx.ConnectError:
                assert process.poll() is None and time.monotonic() < deadline, process.stderr.read()
                time.sleep(0.2)
        assert response.status_code == 200 and "prompt_token_ids" not in response.json()
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=30)
    (row,) = [r for r in parquet_spans(tmp_path) if r["request_model"] == "m"]
    assert row["completion_token_ids"] == server.calls[0].token_ids
    assert row["service_name"] == "tracerl-gateway"


def test_the_cli_refuses_an_upstream_that_is_not_a_url():
    tracerl_bin = str(Path(sys.executable).parent / "tracerl")
    done = subprocess.run([tracerl_bin, "gateway", "--upstream", "localhost"], capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "300"})
    assert done.returncode == 2 and "'localhost' is not an http(s) URL" in done.stderr
