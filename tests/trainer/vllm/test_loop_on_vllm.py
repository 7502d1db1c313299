"""The demo loop on a real ``vllm serve``: capture by environment variables, dataset, torch training, reload from disk.

The agent reaches vLLM through a recording proxy, so the test knows exactly what vLLM
answered each call and can hold the captured spans to it.
"""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import httpx
import numpy as np
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tracerl.schemas import attributes as A
from tracerl.orchestration.demo.recipe import DEMO
from tracerl.orchestration.local.config import LocalConfig
from tracerl.orchestration.local.run import PolicyEndpoint, run_local
from tracerl.instrumentation.agent_env import POLICY_MODEL_NAME
from tracerl.orchestration.local.warm_start import starting_policy
from tracerl.trainer.publish import VllmReload, publish
from tracerl.trainer.training.config import TrainConfig
from tracerl.core.uvicorn_thread import serve_in_thread

from .conftest import greedy_chat, transformers_greedy, transformers_logprobs

pytestmark = pytest.mark.slow


def recording_proxy(upstream: str, answers: dict[str, dict]) -> Starlette:
    """Forwards /v1/* to vLLM unchanged and keeps every JSON answer by its id."""

    async def forward(request: Request) -> Response:
        async with httpx.AsyncClient(timeout=120) as client:
            reply = await client.post(f"{upstream}/{request.path_params['path']}", content=await request.body(), headers={"content-type": "application/json"})
        if reply.status_code == 200:
            body = reply.json()
            answers[body["id"]] = body
        headers = {k: v for k, v in reply.headers.items() if k in ("content-type", A.POLICY_VERSION_HEADER)}
        return Response(reply.content, status_code=reply.status_code, headers=headers)

    return Starlette(routes=[Route("/v1/{path:path}", forward, methods=["POST"])])


def llm_spans(data_dir: Path) -> list[dict]:
    query = f"""
        SELECT response_id, policy_version, prompt_token_ids, completion_token_ids, completion_logprobs
        FROM read_parquet('{data_dir}/spans/**/*.parquet', union_by_name = true) WHERE completion_token_ids IS NOT NULL
    """
    return duckdb.sql(query).to_arrow_table().to_pylist()


def test_demo_round_on_vllm_captures_exactly_and_publishes_the_trained_weights(vllm, tmp_path):
    # The demo's warm-started policy: it earns some rewards, so groups have non-zero
    # advantages and training moves the weights (an untrained model earns none).
    start = starting_policy(DEMO, seed=0)
    publish(start, VllmReload(vllm.base_url), version=0)  # same tokenizer and shapes as the model vLLM started on
    answers: dict[str, dict] = {}
    tasks, group = 6, 4
    cfg = LocalConfig(
        out=tmp_path / "run", rounds=1, tasks_per_round=tasks, group_size=group, eval_tasks=3, seed=0,
        model=str(start), train=TrainConfig(epochs=1, minibatch_size=8, learning_rate=1e-2), server="vllm",
    )
    with serve_in_thread(recording_proxy(vllm.base_url, answers), name="recording-proxy") as proxy:
        endpoint = PolicyEndpoint(f"{proxy}/v1", {POLICY_MODEL_NAME: VllmReload(vllm.base_url, served_checkpoint=start)})
        rows = run_local(DEMO, cfg, endpoint=endpoint)
    assert [r["policy_version"] for r in rows] == [0, 1] and rows[0]["transitions"] == tasks * group * 2

    # 1. every captured call holds exactly the ids and log-probs vLLM answered, and the version it served
    for rnd, version in ((0, 0), (1, 1)):
        spans = llm_spans(tmp_path / "run" / "rounds" / f"{rnd:03d}" / "data")
        assert len(spans) == (3 + tasks * group) * 2  # held-out + sampled episodes, two calls each
        for span in spans:
            answer = answers[span["response_id"]]
            choice = answer["choices"][0]
            assert span["prompt_token_ids"] == answer["prompt_token_ids"]
            assert span["completion_token_ids"] == choice["token_ids"]
            sent = np.array([item["logprob"] for item in choice["logprobs"]["content"]], dtype=np.float32)
            np.testing.assert_array_equal(np.array(span["completion_logprobs"], dtype=np.float32), sent)
            assert span["policy_version"] == version  # 3. spans after the reload carry the next version

    # 2. vLLM now serves the trained checkpoint: greedy ids and log-probs are transformers' on it, not on the start
    trained = tmp_path / "run" / "policy" / "v1"
    served = greedy_chat(vllm.base_url, "task: larger 3 4", max_tokens=6)
    assert served["version"] == "1"
    assert served["ids"] == transformers_greedy(trained, served["prompt_ids"], max_tokens=6)
    np.testing.assert_allclose(served["logprobs"], transformers_logprobs(trained, served["prompt_ids"], served["ids"]), atol=1e-4)
    before = transformers_logprobs(start, served["prompt_ids"], served["ids"])
    assert np.abs(np.array(served["logprobs"]) - np.array(before)).max() > 1e-3
    assert json.loads((tmp_path / "run" / "config.json").read_text())["server"] == "vllm"
