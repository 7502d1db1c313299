"""What a training backend is to its callers, and the round of steps every backend takes.

A backend holds a policy and its optimizer across rounds. The torch backend
(:mod:`~tracerl.trainer.training.torch_backend`) runs one process with plain torch; the
OpenRLHF backend (:mod:`~tracerl.trainer.training.openrlhf_backend`) the same steps on
OpenRLHF's model loading and DeepSpeed's ZeRO, on one or many processes. Both inherit
:class:`PolicyGradientTrainer`, so they share everything that defines *what* is learned:
the sample order and layout (:mod:`batch`), the log-probs (:mod:`logprobs`), the objective
(:mod:`objective`) and the metrics. A backend only says how to run a forward pass, a backward
pass and an optimizer step, and how to save. :func:`~tracerl.trainer.training.backends.load_trainer` is the one way callers
(``tracerl train``, scheduled rounds, the local loop) get one.
"""

from __future__ import annotations

import os
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from tracerl.trainer.training.batch import ResponseLogprobs, collate, minibatch_order, served_logprob_gap
from tracerl.trainer.training.config import DEFAULT_MICRO_BATCH_TOKENS, TrainConfig, default_learning_rate
from tracerl.trainer.training.device import peak_memory_bytes
from tracerl.trainer.training.logprobs import token_logprobs
from tracerl.trainer.training.objective import ObjectiveSums, policy_loss
from tracerl.trainer.training.samples import Sample, SampleColumns


@dataclass
class TrainMetrics:
    samples: int = 0
    tokens: int = 0  # action tokens trained on (over all epochs and processes)
    trained_tokens: int = 0  # every token of the samples, prompts included, counted once (what a CPU round's time goes to)
    steps: int = 0  # optimizer steps
    loss: float = 0.0  # mean over steps
    # share of policy tokens where PPO's clip binds (OpenRLHF's clip_ratio, same meaning)
    clip_fraction: float = 0.0
    approx_kl: float = 0.0  # mean of (round-start log-prob - current log-prob) over policy tokens
    is_filtered_fraction: float = 0.0  # policy tokens dropped because trainer and sampler disagree (objective.py)
    entropy: float = 0.0  # mean entropy of the policy at the action tokens, as it trained
    missing_logprobs: int = 0  # samples without served log-probs (weight 1 against the trainer's own)
    # mean |trainer log-prob - served log-prob| before the update; ~0 when the endpoint
    # serves exactly the weights being trained (None: no served log-probs)
    served_logprob_gap: float | None = None
    reference_kl: float | None = None  # openrlhf with a reference model: k3 KL to it
    learning_rate: float = 0.0
    micro_batch_size: int = 0
    world_size: int = 1
    peak_memory_bytes: int = 0  # CUDA max allocated, else the process's peak RSS
    seconds: float = 0.0  # training, log-probs of the round's start included
    tokens_per_second: float = 0.0  # all tokens (prompt and response) through forward and backward, per second

    def as_dict(self) -> dict:
        return asdict(self)


def has_dropout(model: torch.nn.Module) -> bool:
    """Whether a training-mode forward of ``model`` can differ from an eval-mode one: a dropout module with p > 0,
    or a Hugging Face config asking for dropout (attention dropout is an argument of the attention call, not a module)."""
    modules = list(model.modules())
    if any(isinstance(module, torch.nn.Dropout) and module.p > 0 for module in modules):
        return True
    # the model and each of its layers hold the same config: read each one once
    configs = {id(config): config for module in modules if hasattr(config := getattr(module, "config", None), "to_dict")}
    return any("dropout" in key and isinstance(value, (int, float)) and value > 0
               for config in configs.values() for key, value in config.to_dict().items())


class PolicyGradientTrainer(ABC):
    """The steps of a round over a batch of samples; subclasses supply the model and the mechanics."""

    config: TrainConfig
    tokenizer: object
    pad_id: int
    device: torch.device
    rank: int = 0
    world_size: int = 1

    def _place(self, device: torch.device) -> None:
        """Train on ``device``; on CPU with the configured torch threads."""
        self.device = device
        if device.type == "cpu" and self.config.num_threads:
            torch.set_num_threads(self.config.num_threads)

    @property
    def gradient_checkpointing(self) -> bool:
        """As configured; by default on with CUDA (memory is what bounds a GPU), off on CPU."""
        configured = self.config.gradient_checkpointing
        return configured if configured is not None else self.device.type == "cuda"

    def _init_order(self) -> None:
        self._generator = torch.Generator().manual_seed(self.config.seed)

    @property
    def learning_rate(self) -> float:
        return default_learning_rate(self.config)

    @property
    def micro_batch_size(self) -> int:
        share = -(-self.config.minibatch_size // self.world_size)
        return min(self.config.micro_batch_size or share, share)

    # --- what a backend supplies -------------------------------------------------------
    @property
    @abstractmethod
    def policy(self) -> torch.nn.Module:
        """The module whose forward gives the policy's logits (log-probs come from :func:`token_logprobs`)."""

    @abstractmethod
    def _set_training(self, training: bool) -> None: ...

    @abstractmethod
    def _backward(self, loss: torch.Tensor) -> None:
        """Accumulate ``loss``'s gradients (no step)."""

    @abstractmethod
    def _optimizer_step(self) -> None:
        """Clip the accumulated gradients, step, and zero them."""

    def _all_reduce(self, values: torch.Tensor) -> torch.Tensor:
        """Sum over processes (one process: as is)."""
        return values

    _extra_loss_enabled = False  # True where _extra_loss adds a term (its mean is then reported)

    def _extra_loss(self, data: dict[str, torch.Tensor], logprobs: torch.Tensor, minibatch_samples: int) -> tuple[torch.Tensor, float] | None:
        """A term added to the objective (the OpenRLHF backend's reference KL) and its value; None: none."""
        return None

    def _autocast(self):
        return nullcontext()

    @abstractmethod
    def save(self, out_dir: str | os.PathLike, manifest: dict | None = None, *, optimizer_state: bool = False) -> Path:
        """Write a Hugging Face checkpoint (or LoRA adapter) and its manifest atomically; return its folder.

        ``optimizer_state``: also what resuming the optimizer in another process needs (only
        ``tracerl train``'s one-pass-per-process use asks for it; it doubles a checkpoint's size or more).
        """

    # --- shared ----------------------------------------------------------------------
    def _logprobs(self, data: dict[str, torch.Tensor], with_entropy: bool = False, model: torch.nn.Module | None = None):
        """Log-probs (and entropy) of the batch's positions from its first response token on; 0 before (prompt positions)."""
        with self._autocast():
            return token_logprobs(model or self.policy, data["ids"], data["attention"], chunk=self.config.logprob_chunk,
                                  with_entropy=with_entropy, from_position=int(data["first_response"]), temperature=self.config.rollout_temperature)

    @property
    def micro_batch_tokens(self) -> int:
        return self.config.micro_batch_tokens or DEFAULT_MICRO_BATCH_TOKENS.get(self.device.type, DEFAULT_MICRO_BATCH_TOKENS["cuda"])

    def _micro_batches(self, indices: Sequence[int], lengths: Sequence[int]) -> list[tuple[int, ...]]:
        """``indices`` cut into micro-batches, in order: at most ``micro_batch_size`` samples and ``micro_batch_tokens``
        padded tokens each (a row of the batch is as wide as its longest; a sample longer than the budget goes alone).
        ``lengths``: each sample's tokens, prompt and response.

        The token budget is what bounds a forward and backward pass's memory; a count of samples
        alone does not (SmolLM2 at 16 samples of agent prompts was OOM-killed at 20 GB on CPU).
        """
        size, budget = self.micro_batch_size, self.micro_batch_tokens
        micros: list[tuple[int, ...]] = []
        current: list[int] = []
        width = 0
        for i in indices:
            length = lengths[i]
            if current and (len(current) >= size or (len(current) + 1) * max(width, length) > budget):
                micros.append(tuple(current))
                current, width = [], 0
            current.append(i)
            width = max(width, length)
        if current:
            micros.append(tuple(current))
        return micros

    def _to_device(self, data: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {key: value.to(self.device) for key, value in data.items()}

    def _collated(self, samples: SampleColumns, micro: tuple[int, ...]) -> dict[str, torch.Tensor]:
        return self._to_device(collate(samples, micro, self.pad_id))

    def _response_logprobs(
        self, samples: SampleColumns, micros: Sequence[tuple[int, ...]], model: torch.nn.Module | None = None, keep: frozenset = frozenset(),
    ) -> tuple[ResponseLogprobs, dict[tuple[int, ...], dict[str, torch.Tensor]]]:
        """The response-token log-probs of the samples of ``micros`` under the current weights (or ``model``'s), a
        forward pass per micro-batch; with the collated tensors of the micro-batches in ``keep``, for their training pass."""
        out = ResponseLogprobs(samples, self.device)
        kept: dict[tuple[int, ...], dict[str, torch.Tensor]] = {}
        with torch.no_grad():
            for micro in micros:
                data = self._collated(samples, micro)
                out.store(micro, data, self._logprobs(data, model=model))
                if micro in keep:
                    kept[micro] = data
        return out, kept

    def action_logprobs(self, samples: Sequence[Sample], model: torch.nn.Module | None = None) -> list[list[float]]:
        """Each sample's response-token log-probs under the current weights (or ``model``'s), in micro-batches."""
        columns = SampleColumns.from_samples(samples)
        micros = self._micro_batches(range(len(columns)), columns.lengths.tolist())
        return self._response_logprobs(columns, micros, model)[0].per_sample()

    def _epoch_layouts(self, lengths: Sequence[int], epochs: int) -> list[list[tuple[int, list[tuple[int, ...]]]]]:
        """Per epoch, its minibatches in the seeded order: each one's size and this process's micro-batches of it
        (a tail too short to give every process a sample is left out). ``lengths``: each sample's tokens."""
        layouts = []
        for _ in range(epochs):
            order = minibatch_order(len(lengths), self.config.minibatch_size, self._generator)
            layouts.append([(len(indices), self._micro_batches(indices[self.rank :: self.world_size], lengths))
                            for indices in order if len(indices) >= self.world_size])
        return layouts

    def train(
        self, samples: Sequence[Sample], *, epochs: int | None = None, progress: Callable[[int, int], None] | None = None
    ) -> TrainMetrics:
        """Clipped policy-gradient steps (NLL for ``target_only`` rows) over ``samples``; see objective.py.

        ``samples`` as :func:`~tracerl.trainer.training.dataset.read_dataset` gives them are trained on as they are
        (columns); a list of :class:`Sample` is packed into columns first.

        The proximal policy's log-probs (the round's starting weights) are computed on the first
        epoch's own micro-batches, whose collated tensors that epoch then trains on: a micro-batch is
        collated once (samples no micro-batch of this process takes are scored in extra ones). The
        first minibatch trains on the starting weights themselves, so where the forward has no dropout
        its training pass gives their log-probs too and it takes no separate pass: a round of one
        optimizer step runs one forward per micro-batch, not two (TRL's GRPO does the same).
        """
        cfg = self.config
        epochs = cfg.epochs if epochs is None else epochs
        began = time.perf_counter()
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        samples = SampleColumns.from_samples(samples)
        lengths = samples.lengths.tolist()
        layouts = self._epoch_layouts(lengths, epochs)
        first = [micro for _, micros in layouts[0] for micro in micros] if layouts else []
        covered = {i for micro in first for i in micro}
        others = self._micro_batches([i for i in range(len(samples)) if i not in covered], lengths)
        on_start_weights = set(layouts[0][0][1]) if layouts and layouts[0] and not has_dropout(self.policy) else set()
        self._set_training(False)
        # the proximal policy PPO clips against; the first minibatch's samples are filled in by their training pass
        start_logprobs, collated = self._response_logprobs(
            samples, [m for m in first + others if m not in on_start_weights], keep=frozenset(first) - on_start_weights)
        self._set_training(True)
        metrics = TrainMetrics(
            samples=len(samples), missing_logprobs=int((~samples.has_served).sum()), learning_rate=self.learning_rate,
            trained_tokens=sum(lengths),
            micro_batch_size=self.micro_batch_size, world_size=self.world_size,
        )
        total_steps = sum(len(layout) for layout in layouts)
        step_means: dict[str, float] = dict.fromkeys(("loss", "clip", "kl", "filtered", "entropy", "reference_kl"), 0.0)
        seen_tokens = 0
        for layout in layouts:
            for minibatch_samples, micros in layout:
                sums, loss_sum, reference_sum, processed = self._accumulate(samples, micros, start_logprobs, minibatch_samples, collated)
                self._optimizer_step()
                reduced = self._all_reduce(torch.cat([sums.as_tensor(self.device), torch.tensor([loss_sum, reference_sum, processed], dtype=torch.float64, device=self.device)]))
                sums = ObjectiveSums.from_tensor(reduced[:-3])
                loss_sum, reference_sum, processed = (float(v) for v in reduced[-3:])
                metrics.steps += 1
                metrics.tokens += int(sums.tokens)
                seen_tokens += int(processed)
                policy_tokens = max(sums.policy_tokens, 1.0)
                step_means["loss"] += loss_sum / self.world_size
                step_means["clip"] += sums.clipped / policy_tokens
                step_means["kl"] += sums.kl / policy_tokens
                step_means["filtered"] += sums.filtered / policy_tokens
                step_means["entropy"] += sums.entropy / max(sums.tokens, 1.0)
                step_means["reference_kl"] += reference_sum / self.world_size
                if progress:
                    progress(metrics.steps, total_steps)
        if metrics.steps:
            n = metrics.steps
            metrics.loss, metrics.clip_fraction, metrics.approx_kl = step_means["loss"] / n, step_means["clip"] / n, step_means["kl"] / n
            metrics.is_filtered_fraction, metrics.entropy = step_means["filtered"] / n, step_means["entropy"] / n
            if self._extra_loss_enabled:
                metrics.reference_kl = step_means["reference_kl"] / n
        metrics.served_logprob_gap = served_logprob_gap(samples, start_logprobs)
        metrics.seconds = round(time.perf_counter() - began, 3)
        metrics.tokens_per_second = round(seen_tokens / metrics.seconds, 1) if metrics.seconds else 0.0
        metrics.peak_memory_bytes = peak_memory_bytes(self.device)
        return metrics

    def _accumulate(
        self, samples: SampleColumns, micros: list[tuple[int, ...]], start: ResponseLogprobs, minibatch_samples: int,
        collated: dict[tuple[int, ...], dict[str, torch.Tensor]],
    ) -> tuple[ObjectiveSums, float, float, int]:
        """Forward and backward over a minibatch's ``micros`` (this process's); gradients add up to the minibatch's.
        A micro-batch collated for the start log-probs is taken from ``collated`` (and dropped from it); one
        whose start log-probs are not stored yet is on the starting weights, and its forward gives them."""
        cfg = self.config
        sums, loss_sum, reference_sum, processed = ObjectiveSums(), 0.0, 0.0, 0
        for indices in micros:
            data = collated.pop(indices, None) or self._collated(samples, indices)
            logprobs, entropy = self._logprobs(data, with_entropy=True)
            if not start.known[indices[0]]:
                start.store(indices, data, logprobs)
            old = start.columns(data)
            rollout = torch.where(data["has_served"].unsqueeze(1), data["served_logprobs"], old)
            loss, micro_sums = policy_loss(
                logprobs, old, rollout, data["advantages"], data["action_mask"], data["target_only"], clip_epsilon=cfg.clip_epsilon,
                is_bounds=tuple(cfg.is_bounds), minibatch_samples=minibatch_samples, world_size=self.world_size, entropy=entropy.detach(),
            )
            extra = self._extra_loss(data, logprobs, minibatch_samples)
            if extra is not None:
                loss = loss + extra[0]
                reference_sum += extra[1]
            self._backward(loss)
            sums.add(micro_sums)
            loss_sum += float(loss.detach())
            processed += int(data["attention"].sum())
        return sums, loss_sum, reference_sum, processed
