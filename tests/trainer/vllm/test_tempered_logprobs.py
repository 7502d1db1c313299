"""Sampled at a temperature, trained as sampled: vLLM (started by tracerl, ``--logprobs-mode
processed_logprobs``) reports the log-probs of softmax(logits / T), the distribution each token was
drawn from, and the trainer told the rollouts' temperature computes the same, so the importance ratio
and the gradient are those of the policy that sampled."""

from __future__ import annotations

import httpx
import pytest

from tracerl.trainer.serving.vllm_process import running_vllm
from tracerl.trainer.training.config import TrainConfig
from tracerl.trainer.training.dataset import Sample
from tracerl.trainer.training.torch_backend import PolicyTrainer

TEMPERATURE = 0.6


@pytest.fixture(scope="module")
def sampled(vllm_python, start_model, tmp_path_factory) -> list[Sample]:
    """Eight completions vLLM sampled at ``TEMPERATURE``, with the log-probs it reported (its own server: the
    session's is republished by other tests)."""
    samples = []
    with running_vllm(start_model, log_path=tmp_path_factory.mktemp("vllm-log") / "vllm.log") as server:
        for seed in range(8):
            body = {"model": "policy", "messages": [{"role": "user", "content": f"task: add {seed} {2 * seed}"}], "max_tokens": 12,
                    "temperature": TEMPERATURE, "seed": seed, "return_token_ids": True, "logprobs": True}
            reply = httpx.post(f"{server.base_url}/chat/completions", json=body, timeout=60).raise_for_status().json()
            choice = reply["choices"][0]
            samples.append(Sample(reply["prompt_token_ids"], choice["token_ids"], 1.0,
                                  response_logprobs=[item["logprob"] for item in choice["logprobs"]["content"]]))
    return samples


def largest_gap(samples: list[Sample], trainer: PolicyTrainer) -> float:
    mine = trainer.action_logprobs(samples)
    return max(abs(a - b) for sample, row in zip(samples, mine) for a, b in zip(sample.response_logprobs, row))


def test_the_trainer_told_the_temperature_computes_the_log_probs_vllm_sampled_with(sampled, start_model):
    tempered = PolicyTrainer(start_model, TrainConfig(rollout_temperature=TEMPERATURE))
    assert largest_gap(sampled, tempered) < 1e-4


def test_untempered_log_probs_are_another_policys(sampled, start_model):
    assert largest_gap(sampled, PolicyTrainer(start_model, TrainConfig())) > 0.05  # what the trainer computed before
