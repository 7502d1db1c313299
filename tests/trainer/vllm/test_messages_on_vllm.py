"""Anthropic's Messages API against the CPU vLLM (0.32): its ``/v1/messages`` returns no token ids (its
request model drops the fields capture asks for, its answer has none), so the calls are recorded
with their messages and counted as calls without ids; ``--retokenize`` rebuilds their prompts, and
they are the prompts vLLM's own chat endpoint renders for the same conversation (the fidelity check)."""

from __future__ import annotations

import json
import time

import duckdb
import httpx
import pyarrow as pa
import pytest

from tracerl.schemas import attributes as A
from tracerl_testing.installed import require_module

pytestmark = pytest.mark.slow

AGENT = """
    import json, os
    import anthropic

    client = anthropic.Anthropic(base_url=os.environ["BASE_URL"], api_key="none")
    body = dict(model="policy", system="Be brief.", messages=[{"role": "user", "content": "task: add 3 4"}], max_tokens=5,
                extra_body={"temperature": 0})
    plain = client.messages.create(**body)
    with client.messages.stream(**body) as stream:
        final = stream.get_final_message()
    print(json.dumps({"ids": [plain.id, final.id], "extra": sorted((plain.model_extra or {}).keys())}))
"""


def test_messages_calls_to_vllm_have_no_ids_and_retokenize_to_its_chat_prompt(vllm, start_model, tmp_path):
    require_module("anthropic", "pip install -e '.[frameworks]'")
    from tests.instrumentation.conftest import Captured

    from tracerl.core.storage import write_parquet_atomic
    from tracerl.pipeline import build_dataset
    from tracerl.schemas import REWARDS_SCHEMA

    chat = {"model": "policy", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "task: add 3 4"}],
            "max_tokens": 5, "temperature": 0, "return_token_ids": True}
    direct = httpx.post(f"{vllm.base_url}/chat/completions", json=chat, timeout=120).raise_for_status()
    prompt = direct.json()["prompt_token_ids"]

    captured = Captured(tmp_path, vllm.url)  # the Anthropic SDK appends /v1/messages itself
    done = captured.tracerl_run(AGENT, "--episode-id", "ep-vllm")
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert not {"prompt_token_ids", "token_ids", "logprobs"} & set(result["extra"])  # what capture asked for never reaches the agent
    rows = [r for r in captured.llm_calls() if json.loads(r["attributes"]).get(A.LLM_API) == A.LLM_API_MESSAGES]
    assert [r["response_id"] for r in rows] == result["ids"]
    for row in rows:  # asked for, not given: vLLM 0.32's /v1/messages has no token fields
        assert row["prompt_token_ids"] is None
        assert json.loads(row["attributes"])[A.TOKEN_IDS_MISSING].startswith("server returned no token ids")
        assert row["policy_version"] == int(direct.headers[A.POLICY_VERSION_HEADER])  # the middleware's header

    grade = {"episode_id": "ep-vllm", "name": "grade", "value": 1.0, "time_unix_nano": time.time_ns()}
    write_parquet_atomic(pa.Table.from_pylist([grade], schema=REWARDS_SCHEMA), captured.data_dir / "rewards", prefix="rewards")
    build_dataset(captured.data_dir, tmp_path / "dataset", retokenize=str(start_model))
    rel = duckdb.sql(f"select prompt_token_ids, token_source from read_parquet('{tmp_path}/dataset/{A.DATASET_FILES_GLOB}') order by step")
    assert rel.fetchall() == [(prompt, A.TOKEN_SOURCE_RETOKENIZED)] * 2
