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
"""

from __future__ import annotations

import glob
import math
import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import torch
import torch.nn.functional as F

TRAINER_STATE_FILE = "trainer_state.pt"


class EmptyDatasetError(ValueError):
    """The dataset holds no usable transition."""


@dataclass
class TrainConfig:
    learning_rate: float = 1e-3
    epochs: int = 2  # passes over one round's batch (PPO reuse)
    minibatch_size: int = 64
    clip_epsilon: float = 0.2
    max_grad_norm: float = 1.0
    seed: int = 0
    # torch threads while training (None: torch's default). Small models lose more to
    # thread hand-offs than they gain: one thread measured ~13x faster on 2 busy cores.
    num_threads: int | None = 1


@dataclass
class Sample:
    prompt_ids: list[int]
    response_ids: list[int]
    advantage: float
    old_logprobs: list[float] | None = None
    response_mask: list[int] | None = None  # 1 where the token is the policy's action
    target_only: bool = False  # supervised sample: advantage is ignored


@dataclass
class TrainMetrics:
    samples: int = 0
    tokens: int = 0
    steps: int = 0
    loss: float = 0.0
    clip_fraction: float = 0.0
    approx_kl: float = 0.0
    missing_logprobs: int = 0
    skipped: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)


def read_dataset(dataset_dir: str | os.PathLike) -> tuple[list[Sample], dict[str, int]]:
    """Samples from ``dataset_dir/transitions-*.parquet``; also what was skipped and why."""
    files = sorted(glob.glob(os.path.join(os.fspath(dataset_dir), "transitions-*.parquet")))
    if not files:
        raise EmptyDatasetError(
            f"no transitions-*.parquet in {dataset_dir}: run `tracerl pipeline build-dataset` first"
        )
    columns = ["prompt_token_ids", "response_token_ids", "response_logprobs", "response_mask", "advantage"]
    table = pa.concat_tables(pq.read_table(f, columns=columns) for f in files)
    samples: list[Sample] = []
    skipped: dict[str, int] = {}
    for row in table.to_pylist():
        if not row["response_token_ids"]:
            skipped["empty response"] = skipped.get("empty response", 0) + 1
            continue
        if row["advantage"] is None or not math.isfinite(row["advantage"]):
            skipped["non-finite advantage"] = skipped.get("non-finite advantage", 0) + 1
            continue
        logprobs = row["response_logprobs"]
        if logprobs is not None and len(logprobs) != len(row["response_token_ids"]):
            logprobs = None
            skipped["logprobs of wrong length (ignored)"] = skipped.get("logprobs of wrong length (ignored)", 0) + 1
        samples.append(
            Sample(
                prompt_ids=row["prompt_token_ids"],
                response_ids=row["response_token_ids"],
                advantage=float(row["advantage"]),
                old_logprobs=logprobs,
                response_mask=row["response_mask"],
            )
        )
    if not samples:
        raise EmptyDatasetError(f"{dataset_dir} holds no usable transition (skipped: {skipped})")
    return samples, skipped


def _collate(samples: Sequence[Sample], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded ids plus, per position, the target token's mask and old log-prob."""
    lengths = [len(s.prompt_ids) + len(s.response_ids) for s in samples]
    width = max(lengths)
    ids = torch.full((len(samples), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(samples), width), dtype=torch.long)
    action_mask = torch.zeros((len(samples), width - 1))
    old_logprobs = torch.zeros((len(samples), width - 1))
    has_old = torch.zeros(len(samples), dtype=torch.bool)
    for i, s in enumerate(samples):
        seq = list(s.prompt_ids) + list(s.response_ids)
        ids[i, : len(seq)] = torch.tensor(seq)
        attention[i, : len(seq)] = 1
        start = len(s.prompt_ids) - 1  # logits at position t predict token t + 1
        end = start + len(s.response_ids)
        mask = s.response_mask if s.response_mask is not None else [1] * len(s.response_ids)
        action_mask[i, start:end] = torch.tensor(mask, dtype=torch.float)
        if s.old_logprobs is not None:
            old_logprobs[i, start:end] = torch.tensor(s.old_logprobs)
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
        metrics = TrainMetrics(samples=len(samples), missing_logprobs=sum(s.old_logprobs is None for s in samples))
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
        """Write a complete checkpoint atomically, so a server never loads half of one."""
        out = Path(out_dir)
        tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        self.model.save_pretrained(tmp)
        self.tokenizer.save_pretrained(tmp)
        torch.save(self.optimizer.state_dict(), tmp / TRAINER_STATE_FILE)
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
        return out


def supervised_samples(tokenizer, examples: Sequence[tuple[list[dict], str]]) -> list[Sample]:
    """Chat examples (messages, target text) as samples the trainer imitates."""
    samples = []
    for messages, target in examples:
        prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        response_ids = tokenizer(target, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        samples.append(Sample(prompt_ids=prompt_ids, response_ids=response_ids, advantage=0.0, target_only=True))
    return samples
