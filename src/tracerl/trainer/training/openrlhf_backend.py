"""The OpenRLHF training backend: tracerl's objective on OpenRLHF's model loading and DeepSpeed.

tracerl's samples were generated elsewhere (by agents calling vLLM or ``tracerl serve``), and
OpenRLHF 0.11 has no supported way to train from such samples: its PPO loop owns its rollout
engines. So this backend uses OpenRLHF's parts as a library, for what they do well at scale:

- ``openrlhf.models.Actor`` loads the policy (bf16, flash-attention or sdpa, LoRA with
  ``lora_rank``). Always whole, never under ``zero.Init`` (``ds_config=None``): with ZeRO-3,
  DeepSpeed partitions the loaded weights when the engine starts. Transformers' ZeRO-3 loading,
  with OpenRLHF's patch of it, crashes on transformers 5.24 and on 5.17 left weights that were
  not the checkpoint's (log-probs 0.12 nats apart from a plain forward, measured on an H100,
  tied or untied embeddings alike). The price: each process holds the whole model in host
  memory while it loads (a 7B model in bf16, 15 GB);
- ``openrlhf.utils.deepspeed.DeepspeedStrategy`` sets up DeepSpeed: ZeRO stage 0-3, the
  optimizer, gradient clipping, the data-parallel process group (``torchrun`` or ``deepspeed``
  launchers) and saving Hugging Face checkpoints (gathering ZeRO-3 shards);
- ``openrlhf.models.utils.compute_approx_kl`` (k3) for the optional KL to a frozen reference.

What is learned is defined once, in :class:`~tracerl.trainer.training.backend.PolicyGradientTrainer`
and :mod:`~tracerl.trainer.training.objective` (OpenRLHF's ``PolicyLoss`` formula, checked equal
in the tests), so this backend and the torch backend take the same steps on the same samples.
Gradients accumulate over micro-batches under DeepSpeed's unmanaged accumulation (every
``step()`` is a boundary), which lets a minibatch's last micro-batch be short. Where OpenRLHF
assumes CUDA or a launcher, :mod:`~tracerl.trainer.training.openrlhf_compat` holds the fix.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch

from tracerl.trainer.training.backend import PolicyGradientTrainer
from tracerl.trainer.training.checkpoint import checkpoint_folder
from tracerl.trainer.training.config import OpenRLHFOptions, TrainConfig
from tracerl.trainer.training.device import attention_implementation, default_dtype, launch_environment, training_device
from tracerl.trainer.training.model_folder import inspect_policy_folder
from tracerl.trainer.training.openrlhf_compat import import_openrlhf


class OpenRLHFTrainer(PolicyGradientTrainer):
    """Holds the policy (an OpenRLHF Actor in a DeepSpeed engine) and its optimizer across rounds."""

    def __init__(self, model_path: str | os.PathLike, config: TrainConfig | None = None, options: OpenRLHFOptions | None = None) -> None:
        from transformers import AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        self.config = cfg = config or TrainConfig()
        self.options = opts = options or OpenRLHFOptions()
        folder = inspect_policy_folder(model_path)
        launch = launch_environment()
        self._place(training_device(launch.local_rank))
        orl = self._orl = import_openrlhf()
        dtype = cfg.dtype or default_dtype(self.device)
        args = argparse.Namespace(
            local_rank=launch.local_rank,
            ds=argparse.Namespace(param_dtype=dtype, zero_stage=opts.zero_stage, adam_offload=opts.adam_offload,
                                  tensor_parallel_size=1, ring_attn_size=1),
            train=argparse.Namespace(dynamic_batch_enable=False),
        )
        self.strategy = orl.Strategy(seed=cfg.seed, max_norm=cfg.max_grad_norm, zero_stage=opts.zero_stage, args=args)
        self.rank, self.world_size = launch.rank, launch.world_size
        self.strategy.micro_train_batch_size = self.micro_batch_size
        self.strategy.train_batch_size = self.micro_batch_size * self.world_size
        self.strategy.setup_distributed()

        attn = cfg.attn_implementation or attention_implementation(self.device)
        self.tokenizer = AutoTokenizer.from_pretrained(folder.path)
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        lora_rank = folder.lora_rank if folder.is_adapter else cfg.lora_rank
        actor = orl.Actor(
            folder.base, attn_implementation=attn, param_dtype=dtype, lora_rank=lora_rank,
            lora_alpha=folder.lora_alpha if folder.is_adapter else cfg.lora_alpha,
            target_modules=(folder.target_modules if folder.is_adapter else None) or opts.lora_target_modules, ds_config=None,
        )
        if folder.is_adapter:  # a LoRA round's checkpoint: train the same adapter further
            from peft import set_peft_model_state_dict
            from peft.utils import load_peft_weights

            set_peft_model_state_dict(actor.model, load_peft_weights(str(folder.adapter), device="cpu"))
        if self.gradient_checkpointing:
            actor.gradient_checkpointing_enable()
        optimizer = {
            "optim": "adam",
            "adam": {"lr": self.learning_rate, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.0},
            "lr_scheduler": "constant",  # rounds, not a schedule, set the pace
            "max_norm": cfg.max_grad_norm,
            "scheduler_steps": 1,
        }
        self.actor, self.optimizer, self.scheduler = self.strategy.prepare((actor, optimizer))
        self.reference = None
        if opts.reference_model is not None and opts.kl_coef > 0:
            reference = orl.Actor(opts.reference_model, attn_implementation=attn, param_dtype=dtype, ds_config=None)
            self.reference = self.strategy.prepare(reference)
            self.reference.eval()
            self._extra_loss_enabled = True
        self._init_order()

    @property
    def policy(self) -> torch.nn.Module:
        return self.actor

    @property
    def engine(self):
        return self.actor.model  # the DeepSpeed engine OpenRLHF's prepare() put in the Actor

    def _set_training(self, training: bool) -> None:
        self.actor.train(training)

    def _backward(self, loss: torch.Tensor) -> None:
        self.engine.backward(loss, scale_wrt_gas=False)  # objective.py already divides by the minibatch

    def _optimizer_step(self) -> None:
        self.engine.step()  # unmanaged accumulation: every step() reduces, clips, steps and zeroes

    def _all_reduce(self, values: torch.Tensor) -> torch.Tensor:
        if self.world_size == 1:
            return values
        import torch.distributed as dist

        dist.all_reduce(values, op=dist.ReduceOp.SUM)
        return values

    def _extra_loss(self, data: dict[str, torch.Tensor], logprobs: torch.Tensor, minibatch_samples: int) -> tuple[torch.Tensor, float] | None:
        """The k3 KL to the frozen reference, per sample over its action tokens, weighted by ``kl_coef``."""
        if self.reference is None:
            return None
        with torch.no_grad():
            reference = self._logprobs(data, model=self.reference)
        mask = data["action_mask"]
        k3 = self._orl.compute_approx_kl(logprobs, reference, kl_estimator="k3")
        per_sample = (k3 * mask).sum(1) / (mask.sum(1) + 1e-8)
        kl = per_sample.sum() / minibatch_samples * self.world_size
        return self.options.kl_coef * kl, float(kl.detach())

    def save(self, out_dir: str | os.PathLike, manifest: dict | None = None, *, optimizer_state: bool = False) -> Path:
        """A Hugging Face checkpoint (the LoRA adapter alone with ``lora_rank``), whole or not at all.

        Every process takes part (ZeRO-3 gathers shards); rank 0 writes. The optimizer state stays
        in memory: DeepSpeed's sharded state is resumed in-process only (``optimizer_state`` is ignored).
        """
        if not self.strategy.is_rank_0():
            self.strategy.save_model(self.actor, self.tokenizer, out_dir)
            return Path(out_dir)
        with checkpoint_folder(out_dir, manifest) as folder:
            self.strategy.save_model(self.actor, self.tokenizer, folder)
        return Path(out_dir)
