"""The Responses API against the CPU vLLM (0.32): capture asks for ``enable_response_messages``, and vLLM
answers a non-harmony model's call with the prompt's and the completion's exact ids, which become the
span's and the transition's; the agent gets the answer without them."""

from __future__ import annotations

import json
import time

import duckdb
import httpx
import pyarrow as pa
import pytest

from tracerl.schemas import attributes as A

pytestmark = pytest.mark.slow

AGENT = """
    import json, os
    from openai import OpenAI

    client = OpenAI(base_url=os.environ["BASE_URL"], api_key="none")
    plain = client.responses.create(model="policy", instructions="Be brief.", input="task: add 3 4", max_output_tokens=5, temperature=0)
    events = list(client.responses.create(model="policy", instructions="Be brief.", input="task: add 3 4", max_output_tokens=5,
                                          temperature=0, stream=True))
    final = events[-1].response
    print(json.dumps({"ids": [plain.id, final.id], "extra": sorted((plain.model_extra or {}).keys())}))
"""


def test_responses_calls_to_vllm_become_transitions_with_its_exact_ids(vllm, tmp_path):
    from tests.instrumentation.conftest import Captured

    from tracerl.core.storage import write_parquet_atomic
    from tracerl.pipeline import build_dataset
    from tracerl.schemas import REWARDS_SCHEMA

    body = {"model": "policy", "instructions": "Be brief.", "input": "task: add 3 4", "max_output_tokens": 5, "temperature": 0,
            "enable_response_messages": True}
    direct = httpx.post(f"{vllm.base_url}/responses", json=body, timeout=120).raise_for_status()
    truth = direct.json()
    (prompt,), (completion,) = truth["input_messages"], truth["output_messages"]

    captured = Captured(tmp_path, vllm.base_url)
    done = captured.tracerl_run(AGENT, "--episode-id", "ep-vllm")
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert "input_messages" not in result["extra"] and "output_messages" not in result["extra"]
    rows = captured.llm_calls()
    assert [r["response_id"] for r in rows] == result["ids"]
    for row in rows:
        assert row["prompt_token_ids"] == prompt["tokens"] and row["completion_token_ids"] == completion["tokens"]
        assert row["policy_version"] == int(direct.headers[A.POLICY_VERSION_HEADER])

    grade = {"episode_id": "ep-vllm", "name": "grade", "value": 1.0, "time_unix_nano": time.time_ns()}
    write_parquet_atomic(pa.Table.from_pylist([grade], schema=REWARDS_SCHEMA), captured.data_dir / "rewards", prefix="rewards")
    build_dataset(captured.data_dir, tmp_path / "dataset")
    rel = duckdb.sql(f"select prompt_token_ids, response_token_ids from read_parquet('{tmp_path}/dataset/{A.DATASET_FILES_GLOB}') order by step")
    assert rel.fetchall() == [(prompt["tokens"], completion["tokens"])] * 2
