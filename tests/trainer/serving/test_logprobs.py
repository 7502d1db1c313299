"""Served log-probs equal a teacher-forced forward pass, also when requests are batched together.

The trainer recomputes log-probs of exactly the sampled ids for its importance ratios,
so the sampler's numbers must be those of the distribution each token was drawn from:
softmax(logits / T) at temperature T (top-p shapes only the draw), raw logits when greedy.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
import torch
from transformers import AutoModelForCausalLM


ATOL = 1e-4


@pytest.fixture(scope="module")
def server(policy_server):
    return policy_server


@pytest.fixture(scope="module")
def reference(server):
    model = AutoModelForCausalLM.from_pretrained(server.app.state.engine.model_path).eval()

    def logprobs(prompt: list[int], completion: list[int], temperature: float = 1.0) -> torch.Tensor:
        """log p_T(completion[t] | prompt + completion[:t]) from one forward pass of the whole sequence."""
        with torch.no_grad():
            logits = model(torch.tensor([prompt + completion])).logits[0].float()
        steps = torch.log_softmax(logits[len(prompt) - 1 : -1] / temperature, dim=-1)
        return steps.gather(1, torch.tensor(completion)[:, None])[:, 0], steps

    return logprobs


def _chat(server, i: int, **extra) -> dict:
    body = {
        "model": "policy",
        "messages": [{"role": "user", "content": f"task: add {i} {2 * i} ; " + "x" * (i % 7)}],
        "max_tokens": 6 + i % 5,
        "temperature": 1.0,
        "logprobs": True,
        "return_token_ids": True,
        **extra,
    }
    response = httpx.post(f"{server.base_url}/chat/completions", json=body, timeout=120)
    response.raise_for_status()
    return response.json()


def test_chat_logprobs_match_teacher_forcing(server, reference):
    reply = _chat(server, 3, n=3)
    for choice in reply["choices"]:
        served = torch.tensor([e["logprob"] for e in choice["logprobs"]["content"]])
        expected, _ = reference(reply["prompt_token_ids"], choice["token_ids"])
        torch.testing.assert_close(served, expected, atol=ATOL, rtol=0)


@pytest.mark.parametrize("temperature", [0.6, 1.3])
def test_tempered_samples_report_the_tempered_distributions_log_probs_which_the_trainer_computes(server, reference, temperature):
    from tracerl.trainer.training.config import TrainConfig
    from tracerl.trainer.training.dataset import Sample
    from tracerl.trainer.training.torch_backend import PolicyTrainer

    reply = _chat(server, 3, n=3, temperature=temperature, top_p=0.9)
    trainer = PolicyTrainer(server.app.state.engine.model_path, TrainConfig(rollout_temperature=temperature))
    for choice in reply["choices"]:
        served = torch.tensor([e["logprob"] for e in choice["logprobs"]["content"]])
        expected, _ = reference(reply["prompt_token_ids"], choice["token_ids"], temperature)
        torch.testing.assert_close(served, expected, atol=ATOL, rtol=0)
        (trained,) = trainer.action_logprobs([Sample(reply["prompt_token_ids"], choice["token_ids"], 1.0)])
        torch.testing.assert_close(torch.tensor(trained), expected, atol=ATOL, rtol=0)


def test_logprobs_stay_exact_when_many_requests_share_a_batch(server, reference):
    """Different prompt lengths (left padding) and requests joining mid-decode."""
    with ThreadPoolExecutor(max_workers=24) as pool:
        replies = list(pool.map(lambda i: _chat(server, i), range(24)))
    for reply in replies:
        choice = reply["choices"][0]
        served = torch.tensor([e["logprob"] for e in choice["logprobs"]["content"]])
        expected, _ = reference(reply["prompt_token_ids"], choice["token_ids"])
        torch.testing.assert_close(served, expected, atol=ATOL, rtol=0)


def test_concurrent_greedy_requests_each_get_their_own_greedy_continuation(server, reference):
    """Every token of a batched greedy reply is the argmax of its own prompt's distribution."""
    with ThreadPoolExecutor(max_workers=16) as pool:
        replies = list(pool.map(lambda i: _chat(server, i, temperature=0, max_tokens=8), range(16)))
    prompts = {tuple(r["prompt_token_ids"]) for r in replies}
    assert len(prompts) == 16
    for reply in replies:
        ids = reply["choices"][0]["token_ids"]
        chosen, steps = reference(reply["prompt_token_ids"], ids)
        assert torch.all(chosen >= steps.max(dim=1).values - ATOL)


def test_completions_logprobs_and_top_logprobs_match_teacher_forcing(server, reference):
    prompt = [12, 40, 41, 42, 7]
    reply = httpx.post(
        f"{server.base_url}/completions",
        json={"prompt": prompt, "max_tokens": 8, "logprobs": 3, "return_token_ids": True, "return_tokens_as_token_ids": True, "seed": 1},
    ).json()
    choice = reply["choices"][0]
    expected, steps = reference(prompt, choice["token_ids"])
    torch.testing.assert_close(torch.tensor(choice["logprobs"]["token_logprobs"]), expected, atol=ATOL, rtol=0)
    assert choice["logprobs"]["tokens"] == [f"token_id:{t}" for t in choice["token_ids"]]
    best = steps.topk(3, dim=1)
    for t, tops in enumerate(choice["logprobs"]["top_logprobs"]):
        assert list(tops) == [f"token_id:{i}" for i in best.indices[t].tolist()]
        torch.testing.assert_close(torch.tensor(list(tops.values())), best.values[t], atol=ATOL, rtol=0)
