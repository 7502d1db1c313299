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
Samples come from :mod:`~tracerl.trainer.training.dataset`, in the minibatches and layout
of :mod:`~tracerl.trainer.training.batch` (shared with the OpenRLHF backend); checkpoints
are written through :mod:`~tracerl.trainer.training.checkpoint`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
import torch.nn.functional as F

from tracerl.trainer.training.backend import TrainMetrics
from tracerl.trainer.training.batch import collate, minibatch_order, response_span, served_logprob_gap
from tracerl.trainer.training.checkpoint import checkpoint_folder
from tracerl.trainer.training.config import TrainConfig
from tracerl.trainer.training.dataset import Sample

# The optimizer's state, saved beside the weights so the next round resumes it.
TRAINER_STATE_FILE = "trainer_state.pt"


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
        if state_file.exists():  # resume the optimizer's moments where the last `tracerl train` left them
            self.optimizer.load_state_dict(torch.load(state_file, weights_only=True))
            for group in self.optimizer.param_groups:  # the saved state carries its learning rate: this run's wins
                group["lr"] = self.config.learning_rate
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
        metrics = TrainMetrics(
            samples=len(samples),
            missing_logprobs=sum(s.response_logprobs is None for s in samples),
        )
        logged = [s for s in samples if s.response_logprobs is not None]
        if logged:
            metrics.served_logprob_gap = served_logprob_gap(logged, self.action_logprobs(logged))
        per_epoch = math.ceil(len(samples) / cfg.minibatch_size)
        total_steps = epochs * per_epoch
        loss_sum = clip_sum = kl_sum = 0.0
        for _ in range(epochs):
            for indices in minibatch_order(len(samples), cfg.minibatch_size, self._generator):
                loss, clip_frac, kl, n_tokens = self._step([samples[i] for i in indices])
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

    def action_logprobs(self, samples: Sequence[Sample]) -> list[list[float]]:
        """Each sample's response-token log-probs under the current weights."""
        out: list[list[float]] = []
        with torch.no_grad():
            for start in range(0, len(samples), self.config.minibatch_size):
                chunk = samples[start : start + self.config.minibatch_size]
                data = collate(chunk, self.pad_id)
                logprobs = token_logprobs(self.model, data["ids"], data["attention"])
                out.extend(logprobs[row, slice(*response_span(s))].tolist() for row, s in enumerate(chunk))
        return out

    def _step(self, batch: Sequence[Sample]) -> tuple[float, float, float, int]:
        cfg = self.config
        data = collate(batch, self.pad_id)
        new = token_logprobs(self.model, data["ids"], data["attention"])
        mask = data["action_mask"]
        old = torch.where(data["has_served"].unsqueeze(1), data["served_logprobs"], new.detach())
        advantages = torch.tensor([s.advantage for s in batch]).unsqueeze(1)
        supervised = torch.tensor([s.target_only for s in batch]).unsqueeze(1)
        ratio = torch.exp(new - old)
        unclipped, clipped = ratio * advantages, torch.clamp(ratio, 1 - cfg.clip_epsilon, 1 + cfg.clip_epsilon) * advantages
        surrogate = torch.minimum(unclipped, clipped)
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
            binds = (clipped < unclipped).float()  # the clipped term is the one taken: no gradient
            clip_frac = float((binds * mask).sum() / max(n_tokens, 1))
            kl = float(((old - new.detach()) * mask).sum() / max(n_tokens, 1))
        return loss.item(), clip_frac, kl, n_tokens

    def save(self, out_dir: str | os.PathLike, manifest: dict | None = None) -> Path:
        """Write a complete checkpoint atomically (weights, tokenizer, optimizer state, manifest)."""
        with checkpoint_folder(out_dir, manifest) as folder:
            self.model.save_pretrained(folder)
            self.tokenizer.save_pretrained(folder)
            torch.save(self.optimizer.state_dict(), folder / TRAINER_STATE_FILE)
        return Path(out_dir)
