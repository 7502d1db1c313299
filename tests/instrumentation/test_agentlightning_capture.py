"""tracerl's capture and agentlightning's tracer in one process: each records the tokens it needs.

tracerl asks the server for token ids and log-probs and takes them out of the answer when
the agent did not ask for them. agentlightning's patched AgentOps reads them from the same
answer after tracerl: with it installed, tracerl leaves them in.

agentlightning 0.3 lives in an environment of its own (its pins: openai<3, polars<2, and
through litellm[proxy] mcp>=2.2, which autogen-ext's MCP tools cannot import): the agent runs
there, in a child process, with ``TRACERL_AGL_PYTHON`` (what ``benchmarks/pipeline_build.py``
uses too), else this checkout's ``.venv-agl``; the scripted server and the checks run here.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tracerl_testing.installed import require
from tracerl_testing.scripted_server import running_scripted_server

REPO = Path(__file__).resolve().parents[2]
AGL_PYTHON = os.environ.get("TRACERL_AGL_PYTHON") or str(REPO / ".venv-agl" / "bin" / "python")
AGL_HOW = (f"set TRACERL_AGL_PYTHON or build {AGL_PYTHON} as .ci/run does "
           "(a venv with agentlightning==0.3.0 and tracerl: pip install agentlightning==0.3.0 -e .)")

AGENT = """
import asyncio, json, sys
import agentlightning as agl
from agentlightning.store.memory import InMemoryLightningStore
from openai import OpenAI
import tracerl

base_url, data_dir = sys.argv[1:3]
tracer = agl.AgentOpsTracer()
store = InMemoryLightningStore()
tracer.init_worker(0, store=store)  # agentops' tracer provider becomes the global one
provider = tracerl.instrument(data_dir=data_dir)  # tracerl's processor joins it

async def rollout():
    attempted = await store.start_rollout(input={})
    ids = attempted.rollout_id, attempted.attempt.attempt_id
    async with tracer.trace_context(name=ids[0], rollout_id=ids[0], attempt_id=ids[1]):
        # the agent asks for neither token ids nor log-probs: tracerl does
        answer = OpenAI(base_url=base_url, api_key="unused").chat.completions.create(
            model="m", messages=[{"role": "user", "content": "2+2?"}])
    return answer, await store.query_spans(*ids)

answer, spans = asyncio.run(rollout())
provider.force_flush()  # both exporters, and tracerl's Parquet commit
[call] = [span for span in spans if span.name == "openai.chat.completion"]
print(json.dumps({
    "agent_saw_logprobs": answer.choices[0].logprobs is not None,
    "prompt_token_ids": list(call.attributes.get("prompt_token_ids") or []),
    "response_token_ids": list(call.attributes.get("response_token_ids") or []),
    "logprobs": json.loads(call.attributes.get("logprobs.content") or "[]"),
}))
"""


def test_both_captures_record_token_ids_and_logprobs(tmp_path, parquet_spans):
    require(Path(AGL_PYTHON).is_file(), "agentlightning's environment", AGL_HOW)
    # LITELLM_LOCAL_MODEL_COST_MAP: litellm, which agentlightning imports, stays off the network
    env = {**os.environ, "AGENTOPS_API_KEY": "dummy", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    with running_scripted_server() as server:
        done = subprocess.run([AGL_PYTHON, "-c", AGENT, server.base_url, str(tmp_path / "data")],
                              capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    token_ids = seen["response_token_ids"]
    assert token_ids and seen["prompt_token_ids"] and len(seen["logprobs"]) == len(token_ids)
    assert seen["agent_saw_logprobs"]  # left in the answer for agentlightning's reader
    [row] = [r for r in parquet_spans(tmp_path / "data") if r["name"] == "openai.chat.completion"]
    assert row["completion_token_ids"] == token_ids
    assert row["completion_logprobs"] == pytest.approx([item["logprob"] for item in seen["logprobs"]])
