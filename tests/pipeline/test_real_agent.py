"""End to end with the real thing: an OpenAI client agent, captured by tracerl's OTel setup, to transitions.

The agent runs in its own process against a vLLM-like server on loopback (exact token
ids and log-probs), with tracerl.episode()/emit_reward(); its spans go through the OTel
SDK to the embedded Parquet exporter; the pipeline must give back exactly the tokens
the server produced, with the rewards and advantages worked out by hand.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tracerl_testing.scripted_server import running_scripted_server
from tracerl.pipeline import build_dataset, dataset_table
from tracerl.schemas import environment as E

AGENT = """
import os, openai, tracerl
tracerl.instrument()
client = openai.OpenAI(base_url=os.environ["BASE_URL"], api_key="none")
tools = [{"type": "function", "function": {"name": "calc", "parameters": {"type": "object", "properties": {"expr": {"type": "string"}}}}}]
for question, reward in (("2+2?", 1.0), ("3+3?", 0.0)):
    with tracerl.episode(task_id="arith", split="train"):
        messages = [{"role": "user", "content": question}]
        reply = client.chat.completions.create(model="m", messages=messages, tools=tools)
        call = reply.choices[0].message.tool_calls[0]
        messages += [reply.choices[0].message.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": call.id, "content": "4"}]
        client.chat.completions.create(model="m", messages=messages, tools=tools)
        tracerl.emit_reward(reward, name="correct")
"""


def test_captured_agent_runs_become_transitions_with_exact_tokens(tmp_path):
    with running_scripted_server() as server:
        env = {**os.environ, E.DATA_DIR_ENV: str(tmp_path / "data"), "BASE_URL": server.base_url}
        done = subprocess.run([sys.executable, "-c", AGENT], env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        truth = list(server.calls)
    manifest = build_dataset(tmp_path / "data", tmp_path / "out")
    rows = dataset_table(tmp_path / "out").to_pylist()
    assert len(rows) == len(truth) == 4, manifest["warnings"]
    rows.sort(key=lambda r: (r["return"] == 0.0, r["step"]))  # the rewarded episode first
    for row, call in zip(rows, truth):
        assert row["prompt_token_ids"] == call.prompt_token_ids
        assert row["response_token_ids"] == call.token_ids
        assert row["response_logprobs"] == pytest.approx(call.logprobs, abs=1e-6)
        assert row["policy_version"] == 7 and row["task_id"] == "arith" and row["split"] == "train"
    # one task, returns 1 and 0: mean 0.5, std 0.5
    assert [(r["step"], r["reward"], r["return"], r["advantage"]) for r in rows] == [
        (0, 0.0, 1.0, 1.0), (1, 1.0, 1.0, 1.0), (0, 0.0, 0.0, -1.0), (1, 0.0, 0.0, -1.0)]
    assert manifest["counts"]["llm_calls"]["skipped"] == {}
