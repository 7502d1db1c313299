"""vLLM (CPU build, its own venv) for the tests: started once per session, shared by every vLLM test.

The vLLM environment is ``TRACERL_VLLM_PYTHON``, else this checkout's ``.venv-vllm`` (what
.ci/run builds); without either, the vLLM tests are skipped with a reason. The served
model is the tiny model, whose input and output embeddings are untied: vLLM's CPU reload
leaves a tied output head on the old weights.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
import torch
from transformers import AutoModelForCausalLM

from tracerl.trainer.serving.vllm_process import running_vllm
from tracerl.trainer.tiny_model import build_tiny_model
from tracerl.core.net import free_port
from tracerl_testing.peft_adapter_runner import run_peft_adapter

LORA_RANK = 8


@pytest.fixture(scope="session")
def start_model(tmp_path_factory) -> Path:
    """The policy vLLM is started on (version 0)."""
    return build_tiny_model(tmp_path_factory.mktemp("vllm-start") / "model", seed=1)


@pytest.fixture(scope="session")
def vllm(vllm_python, start_model, tmp_path_factory):
    """``vllm serve`` as publishing needs it: development endpoints, runtime LoRA, tracerl's version header."""
    with running_vllm(start_model, lora_rank=LORA_RANK, log_path=tmp_path_factory.mktemp("vllm-log") / "vllm.log") as server:
        yield server


@pytest.fixture(scope="session")
def vllm_without_dev_mode(vllm_python, start_model, tmp_path_factory):
    """``vllm serve`` as a user may start it: no VLLM_SERVER_DEV_MODE=1, so no weight endpoints."""
    with running_vllm(start_model, dev_mode=False, log_path=tmp_path_factory.mktemp("vllm-log") / "vllm.log") as server:
        yield server


def greedy_chat(base_url: str, content: str, model: str = "policy", max_tokens: int = 6) -> dict:
    """One greedy chat answer with vLLM's token ids and log-probs."""
    body = {
        "model": model, "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens,
        "temperature": 0, "return_token_ids": True, "logprobs": True,
    }
    reply = httpx.post(f"{base_url}/chat/completions", json=body, timeout=60)
    reply.raise_for_status()
    answer = reply.json()
    choice = answer["choices"][0]
    return {
        "prompt_ids": answer["prompt_token_ids"], "ids": choice["token_ids"],
        "logprobs": [item["logprob"] for item in choice["logprobs"]["content"]],
        "version": reply.headers.get("x-tracerl-policy-version"),
    }


def transformers_logprobs(checkpoint: Path, prompt_ids: list[int], ids: list[int]) -> list[float]:
    """Log-probs of ``ids`` after ``prompt_ids`` under ``checkpoint``, run with transformers."""
    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
    sequence = torch.tensor([prompt_ids + ids])
    with torch.no_grad():
        logits = model(sequence).logits[0]
    positions = torch.arange(len(prompt_ids) - 1, len(prompt_ids) + len(ids) - 1)
    return torch.log_softmax(logits[positions], -1)[torch.arange(len(ids)), torch.tensor(ids)].tolist()


def transformers_greedy(checkpoint: Path, prompt_ids: list[int], max_tokens: int) -> list[int]:
    """Greedy continuation of ``prompt_ids`` under ``checkpoint``, run with transformers."""
    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt_ids]), max_new_tokens=max_tokens, do_sample=False)
    return out[0, len(prompt_ids):].tolist()


def peft_logprobs(vllm_python: str, base: Path, adapter: Path, prompt_ids: list[int], ids: list[int]) -> list[float]:
    """Log-probs of ``ids`` after ``prompt_ids`` under ``base`` with ``adapter``, run with peft (in vLLM's venv)."""
    args = ("logprobs", str(base), str(adapter), json.dumps(prompt_ids + ids), str(len(prompt_ids)))
    return json.loads(run_peft_adapter(vllm_python, *args))


@pytest.fixture()
def adapter_folder(tmp_path) -> Path:
    """A folder that passes for a LoRA adapter up to vLLM's own loading (for the cases that fail before it)."""
    (tmp_path / "adapter").mkdir()
    (tmp_path / "adapter" / "adapter_config.json").write_text("{}")
    return tmp_path / "adapter"


@pytest.fixture()
def unused_port_url() -> str:
    """An OpenAI base URL nothing listens at."""
    return f"http://127.0.0.1:{free_port()}/v1"
