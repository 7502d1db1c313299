"""The torch backend: real gradient steps on the tiny model, read from dataset Parquet."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from tracerl.schemas import DATASET_SCHEMA
from tracerl.trainer.tiny_model import build_tiny_model
from tracerl.trainer.training.torch_backend import (
    EmptyDatasetError,
    PolicyTrainer,
    TrainConfig,
    read_dataset,
    token_logprobs,
)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", seed=0)


def _logprob_of(trainer: PolicyTrainer, prompt: list[int], response: list[int]) -> float:
    ids = torch.tensor([prompt + response])
    with torch.no_grad():
        lp = token_logprobs(trainer.model, ids, torch.ones_like(ids))
    return float(lp[0, len(prompt) - 1 :].sum())


def _write_dataset(folder, rows):
    folder.mkdir(parents=True, exist_ok=True)
    full = []
    for i, row in enumerate(rows):
        full.append({
            "episode_id": f"ep{i}", "task_id": "t", "split": "train", "agent_name": None, "step": 0,
            "response_mask": [1] * len(row["response_token_ids"]), "reward": row["advantage"],
            "return": row["advantage"], "policy_version": 0, "trace_id": f"{i:032x}", "span_id": f"{i:016x}",
            "response_id": None, "input_messages": None, "output_messages": None, **row,
        })
    pq.write_table(pa.Table.from_pylist(full, schema=DATASET_SCHEMA), folder / "transitions-0.parquet")


def test_policy_gradient_moves_probability_towards_positive_advantage(model_dir, tmp_path):
    trainer = PolicyTrainer(model_dir, TrainConfig(learning_rate=3e-3, epochs=4, minibatch_size=8))
    prompt, good, bad = [10, 11, 12, 13], [40, 41], [50, 51]
    before_good, before_bad = _logprob_of(trainer, prompt, good), _logprob_of(trainer, prompt, bad)
    rows = [
        {"prompt_token_ids": prompt, "response_token_ids": good, "response_logprobs": None, "advantage": 1.0},
        {"prompt_token_ids": prompt, "response_token_ids": bad, "response_logprobs": None, "advantage": -1.0},
    ] * 4
    _write_dataset(tmp_path / "ds", rows)
    samples, skipped = read_dataset(tmp_path / "ds")
    stats = trainer.train(samples)
    assert stats.steps == 4 and stats.samples == 8 and stats.missing_logprobs == 8 and skipped == {}
    assert _logprob_of(trainer, prompt, good) > before_good + 0.5
    assert _logprob_of(trainer, prompt, bad) < before_bad - 0.5


def test_ratio_uses_logged_logprobs_and_clips(model_dir, tmp_path):
    """Logged log-probs far below the current policy's put the ratio outside the clip range."""
    trainer = PolicyTrainer(model_dir, TrainConfig(epochs=1, minibatch_size=4))
    prompt, response = [10, 11, 12], [40, 41, 42]
    current = torch.tensor([prompt + response])
    with torch.no_grad():
        lp = token_logprobs(trainer.model, current, torch.ones_like(current))[0, len(prompt) - 1 :].tolist()
    stale = [v - 1.0 for v in lp]  # the sampler saw each token e times less likely
    _write_dataset(tmp_path / "ds", [{"prompt_token_ids": prompt, "response_token_ids": response, "response_logprobs": stale, "advantage": 1.0}] * 4)
    samples, _ = read_dataset(tmp_path / "ds")
    stats = trainer.train(samples)
    assert stats.missing_logprobs == 0
    assert stats.clip_fraction == pytest.approx(1.0)
    assert stats.approx_kl == pytest.approx(-1.0, abs=1e-3)


def test_checkpoint_round_trip_resumes_the_optimizer(model_dir, tmp_path):
    trainer = PolicyTrainer(model_dir, TrainConfig(epochs=1, minibatch_size=2))
    _write_dataset(tmp_path / "ds", [{"prompt_token_ids": [5, 6], "response_token_ids": [7], "response_logprobs": None, "advantage": 1.0}] * 2)
    trainer.train(read_dataset(tmp_path / "ds")[0])
    out = trainer.save(tmp_path / "v1")
    assert (out / "config.json").exists() and (out / "trainer_state.pt").exists()
    assert not list(tmp_path.glob(".v1.tmp-*"))
    resumed = PolicyTrainer(out)
    assert resumed.optimizer.state_dict()["state"], "optimizer moments were not restored"
    for a, b in zip(trainer.model.parameters(), resumed.model.parameters()):
        assert torch.equal(a, b)


def test_missing_or_unusable_datasets_say_what_to_do(tmp_path):
    with pytest.raises(EmptyDatasetError, match="build-dataset"):
        read_dataset(tmp_path / "nowhere")
    _write_dataset(tmp_path / "ds", [{"prompt_token_ids": [1], "response_token_ids": [], "response_logprobs": None, "advantage": 1.0}])
    with pytest.raises(EmptyDatasetError, match="empty response"):
        read_dataset(tmp_path / "ds")
