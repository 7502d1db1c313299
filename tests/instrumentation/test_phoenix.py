"""Keep your trace UI: one captured run goes to tracerl and to Arize Phoenix at once.

With OpenTelemetry's own means, no code: ``OTEL_TRACES_EXPORTER=tracerl,otlp`` gives the SDK two
exporters (each behind its own batch span processor), tracerl's Parquet exporter and OTLP/HTTP to
Phoenix. A real Phoenix server (``arize-phoenix`` from PyPI, in ``.venv-phoenix``, which .ci/run
builds) is asked for the run's LLM spans: every call is there with its messages, and tracerl's
spans have every call with its exact token ids.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from tracerl.core.net import free_port
from tracerl_testing.installed import require

pytestmark = pytest.mark.slow  # Phoenix takes ~15 s to start

PHOENIX = Path(os.environ.get("TRACERL_PHOENIX", Path(__file__).resolve().parents[2] / ".venv-phoenix" / "bin" / "phoenix"))

AGENT = """
import os, openai
client = openai.OpenAI(base_url=os.environ["BASE_URL"])
for n in range(3):
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": f"question {n}"}])
"""


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory):
    require(PHOENIX.is_file(), "Arize Phoenix", "python3 -m venv .venv-phoenix && .venv-phoenix/bin/pip install arize-phoenix (or set TRACERL_PHOENIX to its `phoenix`)")
    port = free_port()
    env = {**os.environ, "PHOENIX_WORKING_DIR": str(tmp_path_factory.mktemp("phoenix")), "PHOENIX_HOST": "127.0.0.1",
           "PHOENIX_PORT": str(port), "PHOENIX_GRPC_PORT": str(free_port()), "PHOENIX_TELEMETRY_ENABLED": "false"}
    proc = subprocess.Popen([str(PHOENIX), "serve"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while True:
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"phoenix serve did not start: {proc.stderr.read()[-2000:]}")
        time.sleep(0.5)
    yield url
    proc.terminate()
    proc.wait(timeout=30)


def _llm_spans(phoenix: str, project: str, want: int) -> list[dict]:
    """The project's LLM spans once Phoenix has ``want`` of them (it ingests asynchronously)."""
    deadline = time.monotonic() + 60
    while True:
        reply = httpx.get(f"{phoenix}/v1/projects/{project}/spans", params={"limit": 100}, timeout=10)
        spans = [s for s in reply.json().get("data", []) if s.get("span_kind") == "LLM"] if reply.status_code == 200 else []
        if len(spans) >= want or time.monotonic() > deadline:
            return spans
        time.sleep(0.5)


def test_one_run_reaches_tracerl_and_phoenix_with_every_call(phoenix, captured, server):
    done = captured.tracerl_run(
        AGENT, OTEL_TRACES_EXPORTER="tracerl,otlp", OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=f"{phoenix}/v1/traces",
        OTEL_EXPORTER_OTLP_TRACES_PROTOCOL="http/protobuf", OTEL_RESOURCE_ATTRIBUTES="openinference.project.name=agent-under-rl",
    )
    assert done.returncode == 0, done.stderr

    spans = _llm_spans(phoenix, "agent-under-rl", 3)
    asked = sorted(s["attributes"]["llm.input_messages.0.message.content"] for s in spans)
    assert asked == ["question 0", "question 1", "question 2"]

    calls = [r for r in captured.rows() if r["prompt_token_ids"] is not None]
    assert sorted(tuple(c["completion_token_ids"]) for c in calls) == sorted(tuple(t.token_ids) for t in server.calls)
    assert {c["trace_id"] for c in calls} == {s["context"]["trace_id"] for s in spans}  # the same spans, in both places
