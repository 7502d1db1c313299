"""The one objective every backend optimises: decoupled PPO with a truncated importance correction.

Three log-probs meet in each action token:

- ``logprobs``: the policy being trained, with gradients;
- ``old_logprobs``: the same trainer's log-probs at the start of the round (the *proximal*
  policy). PPO's clip keeps the round's steps near it. Taken from the trainer, not the server,
  because the server's numbers come from other kernels and often another dtype (vLLM in
  bf16 vs the trainer), so a clip against them would bind on noise;
- ``rollout_logprobs``: what the server logged when it sampled the token (the *behaviour*
  policy; it may be versions older than the trainer, see ``--max-policy-lag``). The token's
  loss is weighted by ``pi_old / pi_rollout``, which corrects for that gap, and tokens whose
  weight leaves ``is_bounds`` (0.5 to 5 by default: "icepop") are dropped, since so large a
  gap means the sample says little about this policy. Rows the server logged no log-probs
  for use ``old_logprobs`` (weight 1).

The loss of a sample is the mean over its action tokens, and of a minibatch the mean over its
samples (long answers do not outweigh short ones). It is OpenRLHF's ``PolicyLoss`` with
``token_level_loss=False``, ``is_correction_level="token"``, ``is_correction_mode="mask"``,
``is_correction_gating="ratio"``; ``tests/trainer/training/test_objective.py`` checks the
two agree. ``supervised`` rows (format turns a recipe replays) take plain negative
log-likelihood instead.

Micro-batches and data-parallel ranks: :func:`policy_loss` divides by the *minibatch's*
sample count over all ranks (``minibatch_samples``) and multiplies by ``world_size`` (the
gradient averaging of DDP/DeepSpeed divides by it), so summing the gradients of any split of a
minibatch gives exactly the gradient of the whole.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

DEFAULT_IS_BOUNDS = (0.5, 5.0)


@dataclass
class ObjectiveSums:
    """Token counts and sums over action tokens, added up over micro-batches, divided once per step."""

    tokens: float = 0.0  # every action token, supervised ones included
    policy_tokens: float = 0.0  # action tokens of policy-gradient rows
    clipped: float = 0.0  # policy tokens where PPO's clip binds
    kl: float = 0.0  # sum of (old - current) log-prob over policy tokens
    filtered: float = 0.0  # policy tokens the importance band dropped
    entropy: float = 0.0  # sum of the policy's entropy over every action token

    def add(self, other: ObjectiveSums) -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def as_tensor(self, device: torch.device) -> torch.Tensor:
        return torch.tensor([getattr(self, n) for n in self.__dataclass_fields__], dtype=torch.float64, device=device)

    @classmethod
    def from_tensor(cls, values: torch.Tensor) -> ObjectiveSums:
        return cls(*(float(v) for v in values.tolist()))


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    rollout_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    action_mask: torch.Tensor,
    supervised: torch.Tensor,
    *,
    clip_epsilon: float,
    is_bounds: tuple[float, float] = DEFAULT_IS_BOUNDS,
    minibatch_samples: int,
    world_size: int = 1,
    entropy: torch.Tensor | None = None,
) -> tuple[torch.Tensor, ObjectiveSums]:
    """This micro-batch's share of the minibatch loss, and its statistics' sums.

    Shapes: ``logprobs``, ``old_logprobs``, ``rollout_logprobs``, ``action_mask`` (B, T);
    ``advantages`` (B,) or (B, T); ``supervised`` (B,) bool.
    """
    mask = action_mask.to(logprobs.dtype)
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(1)
    log_ratio = logprobs - old_logprobs
    ratio = log_ratio.clamp(-20.0, 20.0).exp()
    unclipped = ratio * advantages
    clipped = ratio.clamp(1 - clip_epsilon, 1 + clip_epsilon) * advantages
    pg = -torch.minimum(unclipped, clipped)
    is_weight = (old_logprobs - rollout_logprobs).detach().exp()
    keep = (is_weight >= is_bounds[0]) & (is_weight <= is_bounds[1])
    pg = torch.where(keep, is_weight, 0.0) * pg
    per_token = torch.where(supervised.unsqueeze(1), -logprobs, pg)
    counts = mask.sum(1)
    per_sample = (per_token * mask).sum(1) / (counts + 1e-8)
    loss = (per_sample * (counts > 0)).sum() / minibatch_samples * world_size

    with torch.no_grad():
        policy_mask = mask * (~supervised).unsqueeze(1)
        sums = ObjectiveSums(
            tokens=float(counts.sum()),
            policy_tokens=float(policy_mask.sum()),
            clipped=float(((clipped < unclipped).float() * policy_mask).sum()),
            kl=float((-log_ratio * policy_mask).sum()),
            filtered=float(((~keep).float() * policy_mask).sum()),
            entropy=float((entropy * mask).sum()) if entropy is not None else 0.0,
        )
    return loss, sums
