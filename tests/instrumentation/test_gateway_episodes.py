"""Agents whose HTTP client sends no trace context (LiteLLM, other languages) stay in their
episode through the gateway: `Episode.base_url(gateway)` is an episode-scoped base URL,
`/e/<token>/v1`, whose token carries the episode's trace context and baggage."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from opentelemetry import baggage

import tracerl
from tracerl.instrumentation.episodes import context_from_token
from tracerl.pipeline import BuildOptions, build_dataset, dataset_table
from tracerl.pipeline.doctor import diagnose
from tracerl.schemas import attributes as A
from tracerl.trainer.serving.app import running_server
from tracerl.core.net import free_port
from tracerl_testing.net import wait_http

from .conftest import Captured

# Plain http.client: no OpenTelemetry instrumentation exists for it here, so the agent sends
# no traceparent and no baggage, only the episode-scoped URL.
AGENT = """
import http.client, json, os, urllib.parse
import tracerl

def chat(base_url, text):
    url = urllib.parse.urlsplit(base_url + "/chat/completions")
    body = {"model": "policy", "messages": [{"role": "user", "content": text}], "max_tokens": 4}
    connection = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
    connection.request("POST", url.path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    reply = connection.getresponse()
    assert reply.status == 200, reply.read()
    return json.loads(reply.read())

episodes = {}
for reward in (1.0, 0.0):  # two episodes of one task: a GRPO group
    with tracerl.episode(task_id="t-gw", split="train") as ep:
        for turn in range(2):
            chat(ep.base_url(os.environ["GATEWAY_URL"]), f"turn {turn}")
        tracerl.emit_reward(reward, name="correct")
        episodes[ep.episode_id] = {"trace_id": ep.trace_id, "reward": reward}
print(json.dumps(episodes))
"""


@pytest.fixture()
def gateway_before_serve(tmp_path: Path) -> Iterator[tuple[str, Path, Callable[[], None]]]:
    """`tracerl gateway` (its own process, spans to tmp_path/data) in front of `tracerl serve`'s
    app; the third item stops the gateway, which commits its spans."""
    data_dir = tmp_path / "data"
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "TRACERL_"))}
    with running_server() as serve:
        command = [str(Path(sys.executable).parent / "tracerl"), "gateway", "--upstream", serve.url,
                   "--port", str(port), "--data-dir", str(data_dir)]
        process = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)

        def stop() -> None:
            if process.poll() is None:
                process.send_signal(signal.SIGINT)
                process.wait(timeout=30)

        try:
            wait_http(f"http://127.0.0.1:{port}/v1/models", timeout_s=60)
            yield f"http://127.0.0.1:{port}/v1", data_dir, stop
        finally:
            stop()


def test_calls_without_trace_headers_land_in_their_episode_with_task_and_reward(tmp_path, gateway_before_serve):
    gateway, data_dir, stop_gateway = gateway_before_serve
    agent = Captured(tmp_path, gateway)
    done = agent.tracerl_run(AGENT, GATEWAY_URL=gateway)
    assert done.returncode == 0, done.stderr
    episodes = json.loads(done.stdout.strip().splitlines()[-1])
    bad = httpx.post(f"{gateway.removesuffix('/v1')}/e/not-a-token/v1/chat/completions", json={"messages": []})
    assert bad.status_code == 400 and "episode token 'not-a-token'" in bad.json()["error"]["message"]
    stop_gateway()
    gateway_calls = [r for r in agent.rows() if r["service_name"] == "tracerl-gateway" and r["request_model"]]
    assert len(gateway_calls) == 4
    # each call is a child in its episode's trace (not a trace of its own)
    assert {r["trace_id"] for r in gateway_calls} == {e["trace_id"] for e in episodes.values()}

    build_dataset(data_dir, tmp_path / "dataset")
    rows = dataset_table(tmp_path / "dataset").to_pylist()
    assert sorted((r["episode_id"], r["step"]) for r in rows) == sorted((e, s) for e in episodes for s in (0, 1))
    for row in rows:
        assert (row["task_id"], row["split"]) == ("t-gw", "train")
        assert row["return"] == episodes[row["episode_id"]]["reward"]
        assert row["prompt_token_ids"] and row["response_token_ids"]
    notes = diagnose(data_dir, BuildOptions())["notes"]
    assert notes == ["every span that could become a transition did"]


def test_the_token_carries_episode_task_split_and_agent(spans):
    with tracerl.episode(task_id="q-17", split="val") as ep, tracerl.agent("planner"):
        url = tracerl.episode_base_url("http://gw:8080/v1")
    assert ep.base_url("http://gw:8080/v1") == f"http://gw:8080/{A.GATEWAY_EPISODE_PATH}/{ep.token}/v1"
    token = url.split("/")[-2]
    values = baggage.get_all(context_from_token(token))
    assert values == {A.EPISODE_ID: ep.episode_id, A.TASK_ID: "q-17", A.SPLIT: "val", A.AGENT_NAME: "planner"}
