"""The built-in training backend: the shared objective on one process with plain torch.

No DeepSpeed, no launcher: what a laptop, a CPU box or a single GPU needs. On CUDA the
trained weights and Adam's moments stay float32 and the forward runs under bf16 autocast (a
learning rate of 1e-6 vanishes in bf16 weights); on CPU everything is float32. LoRA
(``lora_rank``) trains a float32 PEFT adapter on a frozen base held in the compute dtype; a ``--model`` that is an
adapter continues training it. The optimizer state is saved beside the weights only when the
caller asks (``tracerl train`` resumes it in its next process); in-process rounds keep it in
memory.
"""

from __future__ import annotations

import os
from contextlib import nullcontext
from pathlib import Path

import torch

from tracerl.trainer.training.backend import PolicyGradientTrainer
from tracerl.trainer.training.checkpoint import checkpoint_folder
from tracerl.trainer.training.config import TorchOptions, TrainConfig
from tracerl.trainer.training.device import attention_implementation, default_dtype, torch_dtype, training_device
from tracerl.trainer.training.model_folder import inspect_policy_folder

# The optimizer's state, saved beside the weights so the next `tracerl train` resumes it.
TRAINER_STATE_FILE = "trainer_state.pt"


class PolicyTrainer(PolicyGradientTrainer):
    """Holds the policy and its optimizer across rounds; saves Hugging Face checkpoints."""

    def __init__(self, model_path: str | os.PathLike, config: TrainConfig | None = None, options: TorchOptions | None = None) -> None:
        """``options`` is empty (``TorchOptions``), taken because every backend is built the same way (``load_trainer``)."""
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # our own progress bars say what is going on
        self.config = cfg = config or TrainConfig()
        folder = inspect_policy_folder(model_path)
        self._place(training_device())
        self.compute_dtype = torch_dtype(cfg.dtype or default_dtype(self.device))
        torch.manual_seed(cfg.seed)
        self.tokenizer = AutoTokenizer.from_pretrained(folder.path)
        lora = folder.is_adapter or cfg.lora_rank > 0
        # a frozen base is never updated, so it needs no float32 copy: in the compute dtype, a 7B
        # base is 15 GB instead of 30; PEFT keeps the adapter itself in float32
        model = AutoModelForCausalLM.from_pretrained(
            folder.base, dtype=self.compute_dtype if lora else torch.float32,
            attn_implementation=cfg.attn_implementation or attention_implementation(self.device),
        )
        if lora:
            model = self._with_lora(model, folder, cfg)
        if self.gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            model.config.use_cache = False
        self.model = model.to(self.device)
        self.model.train()
        trainable = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(trainable, lr=self.learning_rate, weight_decay=0.0)
        state_file = folder.path / TRAINER_STATE_FILE
        if state_file.exists():  # resume the optimizer's moments where the last `tracerl train` left them
            self.optimizer.load_state_dict(torch.load(state_file, weights_only=True, map_location=self.device))
            for group in self.optimizer.param_groups:  # the saved state carries its learning rate: this run's wins
                group["lr"] = self.learning_rate
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        self._init_order()

    @staticmethod
    def _with_lora(model, folder, cfg: TrainConfig):
        from peft import LoraConfig, PeftModel, get_peft_model

        if folder.is_adapter:
            return PeftModel.from_pretrained(model, folder.adapter, is_trainable=True)
        return get_peft_model(model, LoraConfig(task_type="CAUSAL_LM", r=cfg.lora_rank, lora_alpha=cfg.lora_alpha, target_modules="all-linear"))

    @property
    def policy(self) -> torch.nn.Module:
        return self.model

    def _set_training(self, training: bool) -> None:
        self.model.train(training)

    def _autocast(self):
        if self.device.type == "cuda" and self.compute_dtype != torch.float32:
            return torch.autocast("cuda", dtype=self.compute_dtype)
        return nullcontext()

    def _backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def _optimizer_step(self) -> None:
        torch.nn.utils.clip_grad_norm_([p for p in self.model.parameters() if p.requires_grad], self.config.max_grad_norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def save(self, out_dir: str | os.PathLike, manifest: dict | None = None, *, optimizer_state: bool = False) -> Path:
        """Weights (or the adapter alone) and tokenizer, and with ``optimizer_state`` Adam's moments, whole or not at all."""
        with checkpoint_folder(out_dir, manifest) as folder:
            self.model.save_pretrained(folder)
            self.tokenizer.save_pretrained(folder)
            if optimizer_state:
                torch.save(self.optimizer.state_dict(), folder / TRAINER_STATE_FILE)
        return Path(out_dir)
