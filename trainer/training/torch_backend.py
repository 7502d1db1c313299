"""The built-in training backend: clipped policy gradient on one machine with torch.

It reads the pipeline's dataset (one row per LLM call, already carrying its
advantage), and for each row maximises the PPO-clipped surrogate

    min(rho_t * A, clip(rho_t, 1 - eps, 1 + eps) * A),  rho_t = pi_theta(y_t) / pi_old(y_t)

over the response tokens, where ``pi_old`` is the log-prob the serving endpoint
logged when it sampled the token. Using the logged log-probs (instead of
recomputing them) is what makes the update correct when the batch was sampled by
an older policy version than the one being trained. Rows without logged log-probs
fall back to the current policy's (ratio 1, plain REINFORCE) and are counted.

Each LLM call is its own sample, as in LightningRL: no trajectory concatenation.
Samples come from :mod:`~tracerl.trainer.training.dataset`; checkpoints are written
through :mod:`~tracerl.trainer.training.checkpoint`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
import torch.nn.functional as F

from tracerl.trainer.training.backend import TrainMetrics
from tracerl.trainer.training.checkpoint import checkpoint_folder
from tracerl.trainer.training.config import TrainConfig
from tracerl.trainer.training.dataset import Sample

# The optimizer's state, saved beside the weights so the next round resumes it.
TRAINER_STATE_FILE = "trainer_state.pt"


def _collate(samples: Sequence[Sample], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded ids plus, per position, the target token's mask and old log-prob."""
    lengths = [len(s.prompt_token_ids) + len(s.response_token_ids) for s in samples]
    width = max(lengths)
    ids = torch.full((len(samples), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(samples), width), dtype=torch.long)
    action_mask = torch.zeros((len(samples), width - 1))
    old_logprobs = torch.zeros((len(samples), width - 1))
    has_old = torch.zeros(len(samples), dtype=torch.bool)
    for i, s in enumerate(samples):
        seq = list(s.prompt_token_ids) + list(s.response_token_ids)
        ids[i, : len(seq)] = torch.tensor(seq)
        attention[i, : len(seq)] = 1
        start = len(s.prompt_token_ids) - 1  # logits at position t predict token t + 1
        end = start + len(s.response_token_ids)
        mask = s.response_mask if s.response_mask is not None else [1] * len(s.response_token_ids)
        action_mask[i, start:end] = torch.tensor(mask, dtype=torch.float)
        if s.response_logprobs is not None:
            old_logprobs[i, start:end] = torch.tensor(s.response_logprobs)
            has_old[i] = True
    return {"ids": ids, "attention": attention, "action_mask": action_mask, "old_logprobs": old_logprobs, "has_old": has_old}


def token_logprobs(model: torch.nn.Module, ids: torch.Tensor, attention: torch.Tensor) -> torch.Tensor:
    """log pi(token_{t+1} | tokens_{<=t}) for every position of a right-padded batch."""
    logits = model(input_ids=ids, attention_mask=attention).logits[:, :-1].float()
    return torch.gather(F.log_softmax(logits, dim=-1), 2, ids[:, 1:].unsqueeze(-1)).squeeze(-1)


class PolicyTrainer:
    """Holds the policy and its optimizer across rounds; saves Hugging Face checkpoints."""

    def __init__(self, model_path: str | os.PathLike, config: TrainConfig | None = None) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # our own progress bars say what is going on
        self.config = config or TrainConfig()
        torch.manual_seed(self.config.seed)
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
        self.model.train()
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=self.config.learning_rate, weight_decay=0.0)
        state_file = Path(model_path) / TRAINER_STATE_FILE
        if state_file.exists():  # resume the optimizer where the last `tracerl train` left it
            self.optimizer.load_state_dict(torch.load(state_file, weights_only=True))
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        self._generator = torch.Generator().manual_seed(self.config.seed)

    def train(
        self,
        samples: Sequence[Sample],
        *,
        epochs: int | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> TrainMetrics:
        """Policy-gradient (or, for ``target_only`` samples, supervised) steps over ``samples``."""
        cfg = self.config
        if cfg.num_threads:
            torch.set_num_threads(cfg.num_threads)
        epochs = cfg.epochs if epochs is None else epochs
        metrics = TrainMetrics(samples=len(samples), missing_logprobs=sum(s.response_logprobs is None for s in samples))
        per_epoch = math.ceil(len(samples) / cfg.minibatch_size)
        total_steps = epochs * per_epoch
        loss_sum = clip_sum = kl_sum = 0.0
        for _ in range(epochs):
            order = torch.randperm(len(samples), generator=self._generator).tolist()
            for start in range(0, len(order), cfg.minibatch_size):
                batch = [samples[i] for i in order[start : start + cfg.minibatch_size]]
                loss, clip_frac, kl, n_tokens = self._step(batch)
                metrics.steps += 1
                metrics.tokens += n_tokens
                loss_sum, clip_sum, kl_sum = loss_sum + loss, clip_sum + clip_frac, kl_sum + kl
                if progress:
                    progress(metrics.steps, total_steps)
        if metrics.steps:
            metrics.loss = loss_sum / metrics.steps
            metrics.clip_fraction = clip_sum / metrics.steps
            metrics.approx_kl = kl_sum / metrics.steps
        return metrics

    def _step(self, batch: Sequence[Sample]) -> tuple[float, float, float, int]:
        cfg = self.config
        data = _collate(batch, self.pad_id)
        new = token_logprobs(self.model, data["ids"], data["attention"])
        mask = data["action_mask"]
        old = torch.where(data["has_old"].unsqueeze(1), data["old_logprobs"], new.detach())
        advantages = torch.tensor([s.advantage for s in batch]).unsqueeze(1)
        supervised = torch.tensor([s.target_only for s in batch]).unsqueeze(1)
        ratio = torch.exp(new - old)
        surrogate = torch.minimum(ratio * advantages, torch.clamp(ratio, 1 - cfg.clip_epsilon, 1 + cfg.clip_epsilon) * advantages)
        per_token = torch.where(supervised, new, surrogate)
        # mean over each sample's action tokens, then over samples: long responses don't dominate
        per_sample = (per_token * mask).sum(1) / mask.sum(1).clamp(min=1)
        loss = -per_sample.mean()
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.max_grad_norm)
        self.optimizer.step()
        with torch.no_grad():
            n_tokens = int(mask.sum())
            clipped = ((ratio - 1).abs() > cfg.clip_epsilon).float()
            clip_frac = float((clipped * mask).sum() / max(n_tokens, 1))
            kl = float(((old - new.detach()) * mask).sum() / max(n_tokens, 1))
        return loss.item(), clip_frac, kl, n_tokens

    def save(self, out_dir: str | os.PathLike) -> Path:
        """Write a complete checkpoint atomically (weights, tokenizer, optimizer state)."""
        with checkpoint_folder(out_dir) as folder:
            self.model.save_pretrained(folder)
            self.tokenizer.save_pretrained(folder)
            torch.save(self.optimizer.state_dict(), folder / TRAINER_STATE_FILE)
        return Path(out_dir)
