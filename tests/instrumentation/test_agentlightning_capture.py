"""tracerl's capture and agentlightning's tracer in one process: each records the tokens it needs.

tracerl asks the server for token ids and log-probs and takes them out of the answer when
the agent did not ask for them. agentlightning's patched AgentOps reads them from the same
answer after tracerl: with it installed, tracerl leaves them in. Needs ``agentlightning``
(``pip install agentlightning==0.3.0``; skipped without it).
"""

from __future__ import annotations

import asyncio
import json

import pytest

pytest.importorskip("agentlightning")


def test_both_captures_record_token_ids_and_logprobs(tmp_path, monkeypatch, parquet_spans):
    monkeypatch.setenv("AGENTOPS_API_KEY", "dummy")
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import agentlightning as agl
    from agentlightning.store.memory import InMemoryLightningStore
    from openai import OpenAI

    import tracerl
    from tracerl_testing.scripted_server import running_scripted_server

    tracer = agl.AgentOpsTracer()
    store = InMemoryLightningStore()
    tracer.init_worker(0, store=store)  # agentops' tracer provider becomes the global one
    provider = tracerl.instrument(data_dir=tmp_path / "data")  # tracerl's processor joins it

    async def rollout(client: OpenAI) -> tuple[object, list]:
        attempted = await store.start_rollout(input={})
        rollout_id, attempt_id = attempted.rollout_id, attempted.attempt.attempt_id
        async with tracer.trace_context(name=rollout_id, rollout_id=rollout_id, attempt_id=attempt_id):
            # the agent asks for neither token ids nor log-probs: tracerl does
            answer = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "2+2?"}])
        return answer, list(await store.query_spans(rollout_id, attempt_id))

    with running_scripted_server() as server:
        answer, spans = asyncio.run(rollout(OpenAI(base_url=server.base_url, api_key="unused")))
    provider.force_flush()  # both exporters, and tracerl's Parquet commit

    [call] = [span for span in spans if span.name == "openai.chat.completion"]
    token_ids = list(call.attributes["response_token_ids"])
    assert token_ids and list(call.attributes["prompt_token_ids"])
    assert len(json.loads(call.attributes["logprobs.content"])) == len(token_ids)
    assert answer.choices[0].logprobs is not None  # left in for agentlightning's reader
    [row] = [r for r in parquet_spans(tmp_path / "data") if r["name"] == "openai.chat.completion"]
    assert row["completion_token_ids"] == token_ids and len(row["completion_logprobs"]) == len(token_ids)

