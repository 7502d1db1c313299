"""Two rounds of the loop with the OpenRLHF backend: sample from a live endpoint, train, publish, sample again.

The endpoint is ``tracerl serve`` on the tiny model (float32, CPU). Each round's samples carry
the token ids and log-probs it returned; the trainer's log-probs before its update must match
them (``served_logprob_gap`` ~ 0): in round 2 that proves the endpoint serves exactly the
checkpoint round 1 trained. On CPU this runs in CI; the ``gpu`` case trains on CUDA when a
GPU is present (the trainer in float32 there too, so the gap check stays exact).
"""

from __future__ import annotations

import httpx
import pytest

from tracerl.trainer.publish import BuiltinServer, publish
from tracerl.trainer.serving.app import running_server
from tracerl.trainer.training.checkpoint import read_checkpoint_manifest
from tracerl.trainer.training.config import TrainConfig
from tracerl.trainer.training.dataset import Sample
from tracerl.trainer.training.openrlhf_backend import OpenRLHFTrainer
from tracerl_testing.installed import require_cuda, require_openrlhf

require_openrlhf()

PROMPT = [10, 11, 12, 13, 14]
TARGET = 40  # the reward: how often the response holds this token


def sample_round(base_url: str, seed: int) -> tuple[list[Sample], float]:
    """Eight sampled responses with the endpoint's log-probs, group-normalised advantages, mean reward."""
    body = {"prompt": PROMPT, "max_tokens": 4, "n": 8, "temperature": 1.0, "seed": seed, "logprobs": 0, "return_token_ids": True}
    reply = httpx.post(f"{base_url}/completions", json=body, timeout=120)
    reply.raise_for_status()
    choices = reply.json()["choices"]
    rewards = [choice["token_ids"].count(TARGET) / len(choice["token_ids"]) for choice in choices]
    mean = sum(rewards) / len(rewards)
    samples = [
        Sample(
            prompt_token_ids=PROMPT, response_token_ids=choice["token_ids"], advantage=reward - mean,
            response_logprobs=choice["logprobs"]["token_logprobs"], policy_version=reply.json()["policy_version"],
        )
        for choice, reward in zip(choices, rewards)
    ]
    return samples, mean


@pytest.mark.slow
@pytest.mark.parametrize("gpu", [False, pytest.param(True, marks=pytest.mark.gpu)])
def test_two_rounds_sample_train_publish(tiny_checkpoint, tmp_path, gpu):
    require_cuda(gpu, "the trainer on the GPU" if gpu else "with CUDA the trainer takes the GPU: the True case runs")
    config = TrainConfig(learning_rate=1e-2, epochs=2, minibatch_size=4, dtype="fp32", attn_implementation="sdpa")
    with running_server(tiny_checkpoint) as server:
        trainer = OpenRLHFTrainer(tiny_checkpoint, config)
        assert trainer.device.type == ("cuda" if gpu else "cpu")
        for round_ in range(2):
            samples, _ = sample_round(server.base_url, seed=round_)
            assert {s.policy_version for s in samples} == {round_}
            metrics = trainer.train(samples)
            assert metrics.served_logprob_gap < 1e-4, f"round {round_}: the endpoint does not serve the trained weights"
            checkpoint = trainer.save(tmp_path / f"v{round_ + 1}", manifest={"parent_version": round_, "metrics": metrics.as_dict()})
            assert publish(checkpoint, BuiltinServer(server.base_url)).policy_version == round_ + 1
            assert read_checkpoint_manifest(checkpoint)["parent_version"] == round_
        after, _ = sample_round(server.base_url, seed=0)
        assert {s.policy_version for s in after} == {2}
        assert trainer.train(after, epochs=0).served_logprob_gap < 1e-4
