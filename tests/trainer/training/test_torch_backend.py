"""The torch backend: real gradient steps on the tiny model, read from dataset Parquet.

Every trainer here is float32 on any device: the comparisons are to 1e-5, and bf16 (the default
with CUDA) is 1e-2 apart.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from tracerl.trainer.training.config import TrainConfig
from tracerl.trainer.training.dataset import Sample, read_dataset
from tracerl.trainer.training.logprobs import token_logprobs
from tracerl.trainer.training.torch_backend import TRAINER_STATE_FILE, PolicyTrainer


def _logprob_of(trainer: PolicyTrainer, prompt: list[int], response: list[int]) -> float:
    ids = torch.tensor([prompt + response], device=trainer.device)
    with torch.no_grad():
        lp = token_logprobs(trainer.model, ids, torch.ones_like(ids))
    return float(lp[0, len(prompt) - 1 :].sum())


def test_policy_gradient_moves_probability_towards_positive_advantage(tiny_checkpoint, tmp_path, write_dataset):
    trainer = PolicyTrainer(tiny_checkpoint, TrainConfig(dtype="fp32", learning_rate=3e-3, epochs=4, minibatch_size=8))
    prompt, good, bad = [10, 11, 12, 13], [40, 41], [50, 51]
    before_good, before_bad = _logprob_of(trainer, prompt, good), _logprob_of(trainer, prompt, bad)
    rows = [
        {"prompt_token_ids": prompt, "response_token_ids": good, "response_logprobs": None, "advantage": 1.0},
        {"prompt_token_ids": prompt, "response_token_ids": bad, "response_logprobs": None, "advantage": -1.0},
    ] * 4
    write_dataset(tmp_path / "ds", rows)
    samples, skipped = read_dataset(tmp_path / "ds")
    stats = trainer.train(samples)
    assert stats.steps == 4 and stats.samples == 8 and stats.missing_logprobs == 8 and skipped == {}
    assert _logprob_of(trainer, prompt, good) > before_good + 0.5
    assert _logprob_of(trainer, prompt, bad) < before_bad - 0.5


def test_stale_served_logprobs_weight_tokens_and_far_ones_drop(tiny_checkpoint, tmp_path, write_dataset):
    """The sampler saw each token e times less likely (an older version): importance weight e, kept;
    e^2 times: outside the (0.5, 5) band, every token dropped and nothing learned. PPO's clip is
    against the round's starting policy, so on the first step it never binds."""
    prompt, response = [10, 11, 12], [40, 41, 42]
    for gap, filtered in ((1.0, 0.0), (2.0, 1.0)):
        trainer = PolicyTrainer(tiny_checkpoint, TrainConfig(dtype="fp32", epochs=1, minibatch_size=4, learning_rate=1e-3))
        current = torch.tensor([prompt + response], device=trainer.device)
        with torch.no_grad():
            lp = token_logprobs(trainer.model, current, torch.ones_like(current))[0, len(prompt) - 1 :].tolist()
        stale = [v - gap for v in lp]
        write_dataset(tmp_path / f"ds{gap}", [{"prompt_token_ids": prompt, "response_token_ids": response, "response_logprobs": stale, "advantage": 1.0}] * 4)
        samples, _ = read_dataset(tmp_path / f"ds{gap}")
        stats = trainer.train(samples)
        assert stats.missing_logprobs == 0 and stats.clip_fraction == 0.0
        assert stats.served_logprob_gap == pytest.approx(gap, abs=1e-5)
        assert stats.is_filtered_fraction == filtered
        assert stats.loss == (0.0 if filtered else pytest.approx(-2.718, abs=1e-2))


def test_micro_batches_give_the_update_of_one_batch_in_the_torch_backend(tiny_checkpoint):
    config = TrainConfig(dtype="fp32", learning_rate=3e-3, epochs=1, minibatch_size=8)
    whole = PolicyTrainer(tiny_checkpoint, config)
    batch = [Sample(prompt_token_ids=[10, 11, 12, 13], response_token_ids=r, advantage=a) for r, a in [([40, 41], 1.0), ([50, 51, 52], -1.0), ([60], 0.5), ([70, 71], -0.5)]] * 2
    samples = [replace(s, response_logprobs=[v + 0.3 * (i % 3) for v in lp]) for i, (s, lp) in enumerate(zip(batch, whole.action_logprobs(batch)))]
    whole.train(samples)
    split = PolicyTrainer(tiny_checkpoint, replace(config, micro_batch_size=3))  # 3 + 3 + 2
    assert split.train(samples).micro_batch_size == 3
    for a, b in zip([p.detach().clone() for p in (split.model).parameters()], [p.detach().clone() for p in (whole.model).parameters()]):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_a_token_budget_cuts_micro_batches_by_padded_tokens_and_gives_the_same_update(tiny_checkpoint):
    """With no --micro-batch-size, a micro-batch holds what fits ``micro_batch_tokens`` (rows x its longest row):
    long samples go a few at a time, short ones many, one longer than the budget alone; the step is the same."""
    config = TrainConfig(dtype="fp32", learning_rate=3e-3, epochs=1, minibatch_size=8)
    short, long = [10, 11, 12, 13], list(range(10, 40))
    batch = [Sample(prompt_token_ids=p, response_token_ids=[40, 41], advantage=a) for p, a in [(short, 1.0), (long, -1.0), (short, 0.5), (long, -0.5)]] * 2
    whole = PolicyTrainer(tiny_checkpoint, replace(config, micro_batch_tokens=10_000))
    budgeted = PolicyTrainer(tiny_checkpoint, replace(config, micro_batch_tokens=64))
    lengths = [len(s.prompt_token_ids) + len(s.response_token_ids) for s in batch]
    micros = budgeted._micro_batches(range(len(batch)), lengths)
    assert [len(m) for m in micros] == [2, 2, 2, 2]  # a long row is 32 tokens wide: two rows fill 64
    assert all(len(m) * max(lengths[i] for i in m) <= 64 for m in micros)
    assert budgeted._micro_batches([0, 2, 4, 6], lengths) == [(0, 2, 4, 6)]  # four short rows of 6 tokens: one pass
    assert PolicyTrainer(tiny_checkpoint, replace(config, micro_batch_tokens=20))._micro_batches([1, 3], lengths) == [(1,), (3,)]
    assert PolicyTrainer(tiny_checkpoint, replace(config, micro_batch_tokens=64, micro_batch_size=1))._micro_batches([0, 2], lengths) == [(0,), (2,)]
    whole.train(batch)
    budgeted.train(batch)
    for a, b in zip(budgeted.model.parameters(), whole.model.parameters()):
        torch.testing.assert_close(a.detach(), b.detach(), atol=5e-5, rtol=1e-4)  # rows padded to other widths


def test_the_default_token_budget_is_the_devices(tiny_checkpoint):
    from tracerl.trainer.training.config import DEFAULT_MICRO_BATCH_TOKENS

    trainer = PolicyTrainer(tiny_checkpoint, TrainConfig(dtype="fp32"))
    assert trainer.micro_batch_tokens == DEFAULT_MICRO_BATCH_TOKENS[trainer.device.type]


def test_checkpoint_round_trip_resumes_the_optimizer(tiny_checkpoint, tmp_path, write_dataset):
    trainer = PolicyTrainer(tiny_checkpoint, TrainConfig(dtype="fp32", epochs=1, minibatch_size=2))
    write_dataset(tmp_path / "ds", [{"prompt_token_ids": [5, 6], "response_token_ids": [7], "response_logprobs": None, "advantage": 1.0}] * 2)
    trainer.train(read_dataset(tmp_path / "ds")[0])
    assert not (trainer.save(tmp_path / "v0") / TRAINER_STATE_FILE).exists()  # in-process rounds keep it in memory
    out = trainer.save(tmp_path / "v1", optimizer_state=True)
    assert (out / "config.json").exists() and (out / TRAINER_STATE_FILE).exists()
    assert not list(tmp_path.glob(".v1.tmp-*"))
    resumed = PolicyTrainer(out)
    assert resumed.optimizer.state_dict()["state"], "optimizer moments were not restored"
    for a, b in zip(trainer.model.parameters(), resumed.model.parameters()):
        assert torch.equal(a, b)


def test_a_resumed_optimizer_takes_this_runs_learning_rate(tiny_checkpoint, tmp_path, write_dataset):
    # The saved optimizer state holds the learning rate it ran with; --lr (0 for a control) must win.
    trainer = PolicyTrainer(tiny_checkpoint, TrainConfig(dtype="fp32", epochs=1, minibatch_size=2, learning_rate=1e-3))
    write_dataset(tmp_path / "ds", [{"prompt_token_ids": [5, 6], "response_token_ids": [7], "response_logprobs": None, "advantage": 1.0}] * 2)
    samples = read_dataset(tmp_path / "ds")[0]
    trainer.train(samples)
    out = trainer.save(tmp_path / "v1", optimizer_state=True)
    frozen = PolicyTrainer(out, TrainConfig(dtype="fp32", epochs=1, minibatch_size=2, learning_rate=0.0))
    before = [p.detach().clone() for p in frozen.model.parameters()]
    frozen.train(samples)
    assert all(torch.equal(a, b) for a, b in zip(before, frozen.model.parameters()))


def test_each_micro_batch_is_collated_once(tiny_checkpoint, tmp_path, write_dataset, monkeypatch):
    """The start log-probs are taken on the first epoch's own micro-batches, which that epoch trains on:
    2 epochs of 4 micro-batches collate 8 batches (a separate start pass made it 12)."""
    from tracerl.trainer.training import backend, batch

    laid_out = []

    def counted(samples, rows, pad_id):
        laid_out.append(len(rows))
        return batch.collate(samples, rows, pad_id)

    monkeypatch.setattr(backend, "collate", counted)
    prompt = [10, 11, 12]
    rows = [{"prompt_token_ids": prompt, "response_token_ids": [40 + i, 41], "response_logprobs": None, "advantage": (-1.0) ** i} for i in range(8)]
    write_dataset(tmp_path / "ds", rows)
    samples, _ = read_dataset(tmp_path / "ds")
    trainer = PolicyTrainer(tiny_checkpoint, TrainConfig(dtype="fp32", learning_rate=1e-3, epochs=2, minibatch_size=4, micro_batch_size=2))
    stats = trainer.train(samples)
    assert stats.steps == 4 and laid_out == [2] * 8


def _forwards(trainer: PolicyTrainer, monkeypatch) -> list[bool]:
    """Record each forward pass of ``trainer``: whether it ran with gradients."""
    passes: list[bool] = []
    original = trainer._logprobs

    def counted(*args, **kwargs):
        passes.append(torch.is_grad_enabled())
        return original(*args, **kwargs)

    monkeypatch.setattr(trainer, "_logprobs", counted)
    return passes


def test_the_first_minibatch_trains_on_the_starting_weights_without_a_separate_pass(tiny_checkpoint, monkeypatch):
    """Its training forward gives the proximal log-probs: a round of one optimizer step runs one forward per micro-batch,
    and updates the weights exactly as the separate pass did (a model with dropout still takes that pass)."""
    from tracerl.trainer.training import backend

    config = TrainConfig(dtype="fp32", learning_rate=3e-3, epochs=1, minibatch_size=8, micro_batch_size=4)
    rows = [([40, 41], 1.0), ([50, 51, 52], -1.0), ([60], 0.5), ([70, 71], -0.5)] * 2
    samples = [Sample(prompt_token_ids=[10, 11, 12, 13], response_token_ids=r, advantage=a, response_logprobs=[-3.0] * len(r)) for r, a in rows]
    fused = PolicyTrainer(tiny_checkpoint, config)
    passes = _forwards(fused, monkeypatch)
    fused_stats = fused.train(samples)
    assert passes == [True, True]  # two micro-batches, each one forward with gradients
    monkeypatch.setattr(backend, "has_dropout", lambda model: True)
    separate = PolicyTrainer(tiny_checkpoint, config)
    passes = _forwards(separate, monkeypatch)
    separate_stats = separate.train(samples)
    assert passes == [False, False, True, True]
    assert fused_stats.served_logprob_gap == pytest.approx(separate_stats.served_logprob_gap, abs=1e-6)
    for a, b in zip(fused.model.parameters(), separate.model.parameters()):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_later_minibatches_keep_the_starting_weights_log_probs(tiny_checkpoint, monkeypatch):
    """Minibatches after the first train on moved weights: their proximal log-probs are taken before the first step."""
    config = TrainConfig(dtype="fp32", learning_rate=3e-3, epochs=2, minibatch_size=4, micro_batch_size=4)
    samples = [Sample(prompt_token_ids=[10, 11, 12], response_token_ids=[40 + i, 41], advantage=(-1.0) ** i) for i in range(8)]
    trainer = PolicyTrainer(tiny_checkpoint, config)
    passes = _forwards(trainer, monkeypatch)
    stats = trainer.train(samples)
    assert stats.steps == 4 and passes == [False] + [True] * 4  # the second minibatch's start pass, then 2 epochs x 2 steps


def test_dropout_is_found_in_modules_and_in_a_configs_rates(tiny_checkpoint):
    from tracerl.trainer.training.backend import has_dropout

    trainer = PolicyTrainer(tiny_checkpoint, TrainConfig(dtype="fp32"))
    assert not has_dropout(trainer.model)
    assert has_dropout(torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(0.1)))
    trainer.model.config.attention_dropout = 0.1  # Qwen2 and Llama pass it to the attention call: no module holds it
    assert has_dropout(trainer.model)
