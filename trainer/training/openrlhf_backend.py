"""The OpenRLHF training backend: the same clipped policy gradient, on OpenRLHF's GPU machinery.

tracerl's samples were generated elsewhere (by agents calling vLLM or ``tracerl serve``),
and OpenRLHF has no supported way to train from such samples: its PPO loop owns its
rollout engines. So this is a small round trainer over OpenRLHF's parts, used as a library:

- ``openrlhf.models.Actor``: loads the policy (full weights, or a LoRA adapter on top with
  ``lora_rank``), and computes per-token log-probs the way OpenRLHF's PPO does (float32
  logits, position ids from the attention mask).
- ``openrlhf.models.PolicyLoss``: the PPO-clipped surrogate with OpenRLHF's token-level
  importance-sampling correction (``is_correction_*``, "icepop": tokens whose
  trainer/sampler ratio leaves ``is_correction_threshold`` are masked, the rest weighted by
  that ratio). Its ``old_log_probs`` are the trainer's own log-probs at the start of the
  round (the proximal policy) and its ``rollout_log_probs`` the log-probs the server sampled
  with, which tracerl's dataset holds exactly (``response_logprobs``). Samples the server
  logged no log-probs for use the trainer's (weight 1), and are counted.
- ``openrlhf.models.utils.compute_approx_kl`` (k3) + ``aggregate_loss``: the optional KL to a
  frozen reference model, added as OpenRLHF's PPO actor adds it.
- ``openrlhf.utils.deepspeed.DeepspeedStrategy``: ZeRO stage 0-3, bf16, gradient
  checkpointing, the optimizer and gradient clipping, the data-parallel launch
  (``deepspeed`` or ``torchrun``) and saving HF checkpoints (gathering ZeRO-3 shards).

Losses are per-sample means over action tokens, then means over samples
(``token_level_loss=False``), like the torch backend, so ``TrainConfig`` means the same in
both: ``minibatch_size`` samples per optimizer step (split over data-parallel ranks),
``epochs`` passes over the round's samples in the shared seeded order, ``clip_epsilon`` the
clip range, ``max_grad_norm`` DeepSpeed's gradient clipping. Where OpenRLHF assumes CUDA,
:mod:`~tracerl.trainer.training.openrlhf_compat` holds the fix.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from tracerl.trainer.training.backend import TrainMetrics
from tracerl.trainer.training.batch import collate, minibatch_order, response_span, served_logprob_gap
from tracerl.trainer.training.checkpoint import checkpoint_folder
from tracerl.trainer.training.config import OpenRLHFOptions, TrainConfig
from tracerl.trainer.training.dataset import Sample
from tracerl.trainer.training.openrlhf_compat import CPU_DTYPE, cuda_available, import_openrlhf


@dataclass
class OpenRLHFMetrics(TrainMetrics):
    is_filtered_fraction: float = 0.0  # action tokens icepop dropped (trainer and sampler disagree)
    reference_kl: float | None = None  # k3 KL to the reference model, when there is one


class OpenRLHFTrainer:
    """Holds the policy (an OpenRLHF Actor in a DeepSpeed engine) and its optimizer across rounds."""

    def __init__(self, model_path: str | os.PathLike, config: TrainConfig | None = None, options: OpenRLHFOptions | None = None) -> None:
        from transformers import AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        self.config = cfg = config or TrainConfig()
        self.options = opts = options or OpenRLHFOptions()
        if cfg.num_threads and not cuda_available():
            torch.set_num_threads(cfg.num_threads)
        orl = import_openrlhf()
        self._orl = orl
        dtype = opts.dtype or ("bf16" if cuda_available() else CPU_DTYPE)
        args = argparse.Namespace(
            local_rank=-1,
            ds=argparse.Namespace(param_dtype=dtype, zero_stage=opts.zero_stage, tensor_parallel_size=1, ring_attn_size=1),
            train=argparse.Namespace(dynamic_batch_enable=False),
        )
        self.strategy = orl.Strategy(seed=cfg.seed, max_norm=cfg.max_grad_norm, zero_stage=opts.zero_stage, args=args)
        self.strategy.setup_distributed()
        self.rank, self.world_size = self.strategy.get_rank(), self.strategy.world_size
        # one optimizer step per minibatch: each rank takes its share, DeepSpeed averages the gradients
        self.strategy.micro_train_batch_size = -(-cfg.minibatch_size // self.world_size)
        self.strategy.train_batch_size = self.strategy.micro_train_batch_size * self.world_size
        self.device = torch.device("cuda", torch.cuda.current_device()) if cuda_available() else torch.device("cpu")

        attn = opts.attn_implementation or ("flash_attention_2" if cuda_available() else "sdpa")
        zero3_config = self.strategy.get_ds_train_config() if opts.zero_stage == 3 else None
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        actor = orl.Actor(
            os.fspath(model_path), attn_implementation=attn, param_dtype=dtype, lora_rank=opts.lora_rank,
            lora_alpha=opts.lora_alpha, target_modules=opts.lora_target_modules, ds_config=zero3_config,
        )
        if opts.gradient_checkpointing:
            actor.gradient_checkpointing_enable()
        optimizer = {
            "optim": "adam",
            "adam": {"lr": cfg.learning_rate, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.0},
            "lr_scheduler": "constant",  # the torch backend's: rounds, not a schedule, set the pace
            "max_norm": cfg.max_grad_norm,
            "scheduler_steps": 1,
        }
        self.actor, self.optimizer, self.scheduler = self.strategy.prepare((actor, optimizer))
        self.reference = None
        if opts.reference_model is not None and opts.kl_coef > 0:
            reference = orl.Actor(opts.reference_model, attn_implementation=attn, param_dtype=dtype, ds_config=zero3_config)
            self.reference = self.strategy.prepare(reference)
            self.reference.eval()
        self.loss_fn = orl.PolicyLoss(
            clip_eps_low=cfg.clip_epsilon, clip_eps_high=cfg.clip_epsilon, token_level_loss=False,
            is_correction_level="token", is_correction_mode="mask", is_correction_gating="ratio",
            is_correction_threshold=opts.is_correction_threshold,
        )
        self._generator = torch.Generator().manual_seed(cfg.seed)

    def action_logprobs(self, samples: Sequence[Sample], model=None) -> list[list[float]]:
        """Each sample's response-token log-probs under the current weights (or ``model``'s)."""
        model = model or self.actor
        out: list[list[float]] = []
        with torch.no_grad():
            for start in range(0, len(samples), self.strategy.micro_train_batch_size):
                chunk = samples[start : start + self.strategy.micro_train_batch_size]
                data = self._to_device(collate(chunk, self.pad_id))
                logprobs = model(data["ids"], data["action_mask"], attention_mask=data["attention"]).float().cpu()
                for row, sample in enumerate(chunk):
                    begin, end = response_span(sample)
                    out.append(logprobs[row, begin:end].tolist())
        return out

    def train(
        self, samples: Sequence[Sample], *, epochs: int | None = None, progress: Callable[[int, int], None] | None = None
    ) -> OpenRLHFMetrics:
        """PPO steps over ``samples``, clipped against the round's starting policy, corrected to the sampler."""
        if any(s.target_only for s in samples):
            raise ValueError("the OpenRLHF backend trains on policy-gradient samples only; supervised samples take the torch backend")
        cfg = self.config
        epochs = cfg.epochs if epochs is None else epochs
        self.actor.eval()
        start_logprobs = self.action_logprobs(samples)  # the proximal policy PPO clips against
        reference_logprobs = self.action_logprobs(samples, self.reference) if self.reference is not None else None
        self.actor.train()
        metrics = OpenRLHFMetrics(
            samples=len(samples), missing_logprobs=sum(s.response_logprobs is None for s in samples),
            served_logprob_gap=served_logprob_gap(samples, start_logprobs),
        )
        per_epoch = -(-len(samples) // cfg.minibatch_size)
        sums = dict.fromkeys(("loss", "clip", "kl", "filtered", "reference_kl"), 0.0)
        for _ in range(epochs):
            for indices in minibatch_order(len(samples), cfg.minibatch_size, self._generator):
                if len(indices) < self.world_size:  # a tail too short to give every rank a sample
                    continue
                mine = indices[self.rank :: self.world_size]
                step = self._step(
                    [samples[i] for i in mine], [start_logprobs[i] for i in mine],
                    [reference_logprobs[i] for i in mine] if reference_logprobs is not None else None,
                )
                metrics.steps += 1
                metrics.tokens += int(step.pop("tokens"))
                for key, value in step.items():
                    sums[key] += value
                if progress:
                    progress(metrics.steps, epochs * per_epoch)
        if metrics.steps:
            metrics.loss, metrics.clip_fraction, metrics.approx_kl = (sums[k] / metrics.steps for k in ("loss", "clip", "kl"))
            metrics.is_filtered_fraction = sums["filtered"] / metrics.steps
            if self.reference is not None:
                metrics.reference_kl = sums["reference_kl"] / metrics.steps
        return metrics

    def _step(self, batch: list[Sample], start: list[list[float]], reference: list[list[float]] | None) -> dict[str, float]:
        orl = self._orl
        data = self._to_device(collate(batch, self.pad_id))
        # the same layout, with the round's starting (and the reference model's) log-probs in place of the served ones
        old = self._to_device(collate([replace(s, response_logprobs=lp) for s, lp in zip(batch, start)], self.pad_id))["served_logprobs"]
        mask = data["action_mask"]
        rollout = torch.where(data["has_served"].unsqueeze(1), data["served_logprobs"], old)
        advantages = torch.tensor([s.advantage for s in batch], device=self.device).unsqueeze(1).expand_as(mask)
        logprobs = self.actor(data["ids"], mask, attention_mask=data["attention"])
        loss, clip, kl, _sampler_kl, filtered = self.loss_fn(logprobs, old, advantages, action_mask=mask, rollout_log_probs=rollout)
        result = {"loss": loss.item(), "clip": clip.item(), "kl": kl.item(), "filtered": filtered.item(), "tokens": mask.sum().item()}
        if reference is not None:
            ref = self._to_device(collate([replace(s, response_logprobs=lp) for s, lp in zip(batch, reference)], self.pad_id))["served_logprobs"]
            kl_ref = orl.aggregate_loss(orl.compute_approx_kl(logprobs, ref, kl_estimator="k3"), mask, token_level_loss=False)
            loss = loss + self.options.kl_coef * kl_ref
            result["reference_kl"] = kl_ref.item()
        self.strategy.backward(loss, self.actor, self.optimizer)
        self.strategy.optimizer_step(self.optimizer, self.actor, self.scheduler)
        if self.world_size > 1:  # the means over ranks; the tokens summed
            tokens = self.strategy.all_reduce(result.pop("tokens"), op="sum")
            result = {**self.strategy.all_reduce(result), "tokens": tokens}
        return result

    def _to_device(self, data: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {key: value.to(self.device) for key, value in data.items()}

    def save(self, out_dir: str | os.PathLike, manifest: dict | None = None) -> Path:
        """A Hugging Face checkpoint (the LoRA adapter alone with ``lora_rank``), whole or not at all."""
        if not self.strategy.is_rank_0():  # takes part in gathering ZeRO-3 shards; rank 0 writes
            self.strategy.save_model(self.actor, self.tokenizer, out_dir)
            return Path(out_dir)
        with checkpoint_folder(out_dir, manifest) as folder:
            self.strategy.save_model(self.actor, self.tokenizer, folder)
        return Path(out_dir)
