"""The OpenRLHF backend, from the real openrlhf package, on CPU: it trains what the torch backend trains.

Every test starts from the tiny model (seed 0). "Served" log-probs are the ones the
starting weights give, as a server running those weights would log them. Every trainer is
float32 on any device: the comparisons are to 1e-5, and bf16 (the default with CUDA) is 1e-2 apart.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch
from transformers import AutoModelForCausalLM

from tracerl.trainer.training.checkpoint import read_checkpoint_manifest
from tracerl.trainer.training.config import TrainConfig
from tracerl.trainer.training.dataset import Sample
from tracerl.trainer.training.config import OpenRLHFOptions
from tracerl.trainer.training.logprobs import token_logprobs
from tracerl.trainer.training.openrlhf_backend import OpenRLHFTrainer
from tracerl.trainer.training.torch_backend import PolicyTrainer
from tracerl_testing.installed import require_openrlhf

require_openrlhf()

PROMPT = [10, 11, 12, 13]
RESPONSES = [([40, 41], 1.0), ([50, 51, 52], -1.0), ([60], 0.5), ([70, 71], -0.5)]


def _served(trainer: OpenRLHFTrainer, samples: list[Sample], shift: float = 0.0) -> list[Sample]:
    """The samples with the log-probs a server on the trainer's current weights logs (plus ``shift``)."""
    return [replace(s, response_logprobs=[v + shift for v in lp]) for s, lp in zip(samples, trainer.action_logprobs(samples))]


def _batch() -> list[Sample]:
    return [Sample(prompt_token_ids=PROMPT, response_token_ids=r, advantage=a) for r, a in RESPONSES] * 2


def _served_apart(trainer, samples: list[Sample]) -> list[Sample]:
    """Served log-probs that differ from the trainer's, by a different amount per sample (a bf16
    server, an older version): some inside icepop's band, one sample's tokens outside it."""
    shifts = [0.0, -0.3, 0.4, -2.0]
    return [replace(s, response_logprobs=[v + shifts[i % 4] for v in lp]) for i, (s, lp) in enumerate(zip(samples, trainer.action_logprobs(samples)))]


def _params(module) -> list[torch.Tensor]:
    return [p.detach().float().clone() for p in module.parameters()]


@pytest.mark.parametrize("micro_batch_size", [None, 1])
def test_both_backends_compute_the_same_loss_and_the_same_update(tiny_checkpoint, micro_batch_size):
    """Same batch, same starting weights, same config, served log-probs apart from the trainer's:
    the same steps, metrics and weights after, to float tolerance; and with micro-batches of one
    sample (gradients accumulated) the same as with the whole minibatch at once.

    Two epochs of two minibatches, so after the first step ratios move away from 1 and the clip
    binds on some tokens: the comparison covers the clipped branch and the importance weights too.
    """
    config = TrainConfig(dtype="fp32", learning_rate=3e-3, epochs=2, minibatch_size=4)
    torch_trainer = PolicyTrainer(tiny_checkpoint, config)
    samples = _served_apart(torch_trainer, _batch())
    theirs = torch_trainer.train(samples)
    openrlhf = OpenRLHFTrainer(tiny_checkpoint, replace(config, micro_batch_size=micro_batch_size))
    ours = openrlhf.train(samples)
    assert (ours.steps, ours.tokens, ours.samples) == (theirs.steps, theirs.tokens, theirs.samples) == (4, 32, 8)
    assert ours.micro_batch_size == (micro_batch_size or 4)
    assert 0 < theirs.clip_fraction < 1 and 0 < theirs.is_filtered_fraction < 1
    for name in ("loss", "clip_fraction", "approx_kl", "is_filtered_fraction", "entropy", "served_logprob_gap"):
        assert getattr(ours, name) == pytest.approx(getattr(theirs, name), abs=1e-5), name
    for a, b in zip(_params(openrlhf.actor.model.module), _params(torch_trainer.model)):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=1e-4)


def test_zero_3_starts_from_the_checkpoints_weights_and_takes_the_same_steps(tiny_checkpoint, tmp_path):
    """ZeRO-3 shards the weights it loaded: its log-probs before training are the checkpoint's, and
    the checkpoint it saves (shards gathered) is the torch backend's after the same steps.

    The regression: loaded under ``zero.Init`` (transformers' ZeRO-3 path with OpenRLHF's patch),
    the model crashed on load here and, on an H100 with transformers 5.17, was not the checkpoint.
    """
    from safetensors.torch import load_file

    config = TrainConfig(dtype="fp32", learning_rate=3e-3, epochs=2, minibatch_size=4)
    torch_trainer = PolicyTrainer(tiny_checkpoint, config)
    samples = _served_apart(torch_trainer, _batch())
    zero3 = OpenRLHFTrainer(tiny_checkpoint, config, OpenRLHFOptions(zero_stage=3))
    flat = lambda rows: [v for row in rows for v in row]  # noqa: E731
    assert flat(zero3.action_logprobs(samples)) == pytest.approx(flat(torch_trainer.action_logprobs(samples)), abs=1e-6)
    theirs, ours = torch_trainer.train(samples), zero3.train(samples)
    assert ours.loss == pytest.approx(theirs.loss, abs=1e-5)
    mine = load_file(zero3.save(tmp_path / "zero3") / "model.safetensors")
    reference = load_file(torch_trainer.save(tmp_path / "torch") / "model.safetensors")
    assert mine.keys() == reference.keys()
    for name in reference:
        torch.testing.assert_close(mine[name], reference[name], atol=2e-5, rtol=1e-4, msg=name)


def test_one_step_raises_positive_and_lowers_negative_advantage_responses(tiny_checkpoint):
    trainer = OpenRLHFTrainer(tiny_checkpoint, TrainConfig(dtype="fp32", learning_rate=3e-3, epochs=1, minibatch_size=8))
    samples = _served(trainer, _batch())
    before = [sum(lp) for lp in trainer.action_logprobs(samples[:4])]
    metrics = trainer.train(samples)
    after = [sum(lp) for lp in trainer.action_logprobs(samples[:4])]
    assert metrics.steps == 1
    for (_, advantage), b, a in zip(RESPONSES, before, after):
        assert (a > b) if advantage > 0 else (a < b), (advantage, b, a)


def test_served_logprob_gap_and_icepop_filter_come_from_the_sampler_log_probs(tiny_checkpoint):
    """A sampler that saw each token e^0.3 times less likely: gap 0.3, ratio e^0.3 kept;
    e^2 times less likely: ratio 7.4, outside icepop's (0.5, 5) band, every token dropped."""
    trainer = OpenRLHFTrainer(tiny_checkpoint, TrainConfig(dtype="fp32", epochs=1, minibatch_size=8, learning_rate=0.0))
    near = trainer.train(_served(trainer, _batch(), shift=-0.3))
    assert near.served_logprob_gap == pytest.approx(0.3, abs=1e-5) and near.is_filtered_fraction == 0.0
    far = trainer.train(_served(trainer, _batch(), shift=-2.0))
    assert far.served_logprob_gap == pytest.approx(2.0, abs=1e-5) and far.is_filtered_fraction == 1.0
    assert far.loss == 0.0  # nothing left to learn from
    missing = trainer.train(_batch())  # no served log-probs: the trainer's own stand in (weight 1)
    assert missing.missing_logprobs == 8 and missing.served_logprob_gap is None


def test_learning_rate_zero_is_the_same_run_without_learning(tiny_checkpoint):
    """``--lr 0``: every step is taken, the loss is computed, and no weight moves (a run that measures the
    loop's cost without changing the policy; learning claims use the shuffled-reward control instead)."""
    trainer = OpenRLHFTrainer(tiny_checkpoint, TrainConfig(dtype="fp32", epochs=2, minibatch_size=4, learning_rate=0.0))
    before = _params(trainer.actor.model.module)
    metrics = trainer.train(_served_apart(trainer, _batch()))
    assert metrics.steps == 4 and metrics.loss != 0.0 and metrics.learning_rate == 0.0
    assert all(torch.equal(a, b) for a, b in zip(before, _params(trainer.actor.model.module)))


def test_reference_kl_is_reported_and_grows_as_the_policy_moves(tiny_checkpoint):
    options = OpenRLHFOptions(reference_model=str(tiny_checkpoint), kl_coef=0.1)
    trainer = OpenRLHFTrainer(tiny_checkpoint, TrainConfig(dtype="fp32", learning_rate=3e-3, epochs=1, minibatch_size=8), options)
    samples = _served(trainer, _batch())
    first = trainer.train(samples)
    assert first.reference_kl == pytest.approx(0.0, abs=1e-7)  # one step from the reference itself
    second = trainer.train(samples)
    assert second.reference_kl > 1e-4


def test_checkpoint_is_a_hugging_face_model_with_its_manifest(tiny_checkpoint, tmp_path):
    trainer = OpenRLHFTrainer(tiny_checkpoint, TrainConfig(dtype="fp32", learning_rate=3e-3, epochs=1, minibatch_size=8))
    samples = _served(trainer, _batch())
    metrics = trainer.train(samples)
    manifest = {"parent": str(tiny_checkpoint), "parent_version": 3, "dataset": {"schema_version": 1}, "metrics": metrics.as_dict()}
    out = trainer.save(tmp_path / "v4", manifest=manifest)
    assert read_checkpoint_manifest(out) == json.loads(json.dumps(manifest))
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary folder left
    reloaded = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    ids = torch.tensor([PROMPT + [40, 41]])
    with torch.no_grad():
        served_now = token_logprobs(reloaded, ids, torch.ones_like(ids))[0, len(PROMPT) - 1 :].tolist()
    assert served_now == pytest.approx(trainer.action_logprobs([samples[0]])[0], abs=1e-6)


def test_lora_trains_and_saves_the_adapter_alone(tiny_checkpoint, tmp_path):
    from peft import PeftModel

    trainer = OpenRLHFTrainer(tiny_checkpoint, TrainConfig(dtype="fp32", learning_rate=1e-2, epochs=2, minibatch_size=4, lora_rank=4, lora_alpha=8))
    samples = _served(trainer, _batch())
    trainer.train(samples)
    out = trainer.save(tmp_path / "adapter")
    assert (out / "adapter_config.json").is_file() and not (out / "model.safetensors").exists()
    base = AutoModelForCausalLM.from_pretrained(tiny_checkpoint, dtype=torch.float32)
    adapted = PeftModel.from_pretrained(base, out)
    ids = torch.tensor([PROMPT + [40, 41]])
    with torch.no_grad():
        served_now = token_logprobs(adapted, ids, torch.ones_like(ids))[0, len(PROMPT) - 1 :].tolist()
    trained = trainer.action_logprobs([samples[0]])[0]
    assert served_now == pytest.approx(trained, abs=1e-5)
    assert trained != pytest.approx(samples[0].response_logprobs, abs=1e-3)  # the adapter moved the policy


def test_adam_offload_takes_the_same_steps_with_the_optimizer_in_host_memory(tiny_checkpoint):
    """``--adam-offload`` moves Adam's moments and fp32 weights to host memory (DeepSpeed's CPU
    Adam): the steps are the torch backend's all the same. On one 141 GB GPU, 7B full weights
    run out of memory without it (benchmarks/results/gpu_check-h200-2026-11-26.jsonl)."""
    config = TrainConfig(dtype="fp32", learning_rate=3e-3, epochs=2, minibatch_size=4)
    torch_trainer = PolicyTrainer(tiny_checkpoint, config)
    samples = _served_apart(torch_trainer, _batch())
    theirs = torch_trainer.train(samples)
    offloaded = OpenRLHFTrainer(tiny_checkpoint, config, OpenRLHFOptions(adam_offload=True))
    assert offloaded.engine.zero_offload_optimizer()
    ours = offloaded.train(samples)
    assert ours.loss == pytest.approx(theirs.loss, abs=1e-5)
    for a, b in zip(_params(offloaded.actor.model.module), _params(torch_trainer.model)):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=1e-4)
