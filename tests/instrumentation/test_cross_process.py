"""One episode across processes: an agent and the tool server it calls over HTTP, both
captured by `tracerl run`, land in the same trace and episode (W3C trace context and
baggage, propagated by the standard OTel HTTP instrumentations)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import pytest

TOOL_SERVER = """
import sys
import uvicorn
from opentelemetry import trace
from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

async def add(request):
    with trace.get_tracer("tools").start_as_current_span("tool.add"):
        return JSONResponse({"sum": int(request.query_params["a"]) + int(request.query_params["b"])})

app = OpenTelemetryMiddleware(Starlette(routes=[Route("/add", add)]))
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""

AGENT = """
import os, sys, httpx
print("SUM", httpx.get(os.environ["TOOL_URL"] + "/add", params={"a": 2, "b": 3}).json()["sum"])
"""


@pytest.mark.slow
def test_a_tool_server_in_another_process_lands_in_the_agents_episode(tmp_path: Path, parquet_spans):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    (tmp_path / "tool_server.py").write_text(textwrap.dedent(TOOL_SERVER))
    (tmp_path / "agent.py").write_text(textwrap.dedent(AGENT))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "TRACERL_"))}
    env["TOOL_URL"] = f"http://127.0.0.1:{port}"
    tracerl = [str(Path(sys.executable).parent / "tracerl"), "run", "--data-dir", str(tmp_path / "data")]
    server = subprocess.Popen([*tracerl, "--", sys.executable, "tool_server.py", str(port)], cwd=tmp_path, env=env)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{port}/")
                break
            except httpx.ConnectError:
                assert server.poll() is None and time.monotonic() < deadline
                time.sleep(0.2)
        agent = subprocess.run(
            [*tracerl, "--task-id", "add-2-3", "--split", "test", "--", sys.executable, "agent.py"],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
        )
        assert agent.returncode == 0 and "SUM 5" in agent.stdout, agent.stderr
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(timeout=30)

    rows = parquet_spans(tmp_path / "data")
    (tool,) = [r for r in rows if r["name"] == "tool.add"]
    (client,) = [r for r in rows if r["kind"] == "CLIENT"]
    assert tool["service_name"] != client["service_name"] or tool["resource"] != client["resource"]
    assert tool["trace_id"] == client["trace_id"]
    assert (tool["episode_id"], tool["task_id"], tool["split"]) == (client["episode_id"], "add-2-3", "test")
    assert tool["episode_id"]
