"""The one objective (objective.py): OpenRLHF's PolicyLoss formula, and exact under any micro-batch split."""

from __future__ import annotations

import pytest
import torch

from tracerl.trainer.training.objective import policy_loss
from tracerl_testing.installed import require_openrlhf


def _case(seed: int = 0):
    """Four rows of five tokens: trainer, round-start and sampler log-probs that all differ,
    with sampler gaps inside and outside the (0.5, 5) band, and one row partly masked."""
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(4, 5, generator=g) * 3
    new = (old + torch.randn(4, 5, generator=g) * 0.3).requires_grad_()
    rollout = old - torch.randn(4, 5, generator=g) * 1.2  # some |gap| > log 5 or < log 0.5
    mask = torch.ones(4, 5)
    mask[2, 3:] = 0
    advantages = torch.tensor([1.0, -1.0, 0.5, -0.25])
    return new, old, rollout, advantages, mask


def test_loss_and_gradient_are_openrlhfs_policy_loss():
    require_openrlhf()
    from tracerl.trainer.training.openrlhf_compat import import_openrlhf

    orl = import_openrlhf()
    new, old, rollout, advantages, mask = _case()
    theirs_fn = orl.PolicyLoss(
        clip_eps_low=0.2, clip_eps_high=0.2, token_level_loss=False, is_correction_level="token",
        is_correction_mode="mask", is_correction_gating="ratio", is_correction_threshold=(0.5, 5.0),
    )
    theirs, clip, kl, _, filtered = theirs_fn(new, old, advantages.unsqueeze(1).expand_as(mask), action_mask=mask, rollout_log_probs=rollout)
    (grad_theirs,) = torch.autograd.grad(theirs, new)
    ours, sums = policy_loss(new, old, rollout, advantages, mask, torch.zeros(4, dtype=torch.bool), clip_epsilon=0.2, minibatch_samples=4)
    (grad_ours,) = torch.autograd.grad(ours, new)
    assert 0 < float(filtered) < 1, "the case must drop some tokens and keep others"
    assert float(ours) == pytest.approx(float(theirs), abs=1e-6)
    torch.testing.assert_close(grad_ours, grad_theirs, atol=1e-7, rtol=0)
    assert sums.clipped / sums.policy_tokens == pytest.approx(float(clip), abs=1e-6)
    assert sums.kl / sums.policy_tokens == pytest.approx(float(kl), abs=1e-6)
    assert sums.filtered / sums.policy_tokens == pytest.approx(float(filtered), abs=1e-6)


def test_micro_batches_and_ranks_add_up_to_the_whole_minibatch():
    new, old, rollout, advantages, mask = _case(1)
    supervised = torch.tensor([False, True, False, False])
    kw = dict(clip_epsilon=0.2, minibatch_samples=4)
    whole, _ = policy_loss(new, old, rollout, advantages, mask, supervised, **kw)
    (grad_whole,) = torch.autograd.grad(whole, new)
    # three micro-batches of uneven size (1, 2, 1), as the last micro-batch of a minibatch may be short
    parts = [policy_loss(new[s], old[s], rollout[s], advantages[s], mask[s], supervised[s], **kw)[0] for s in (slice(0, 1), slice(1, 3), slice(3, 4))]
    (grad_parts,) = torch.autograd.grad(sum(parts), new)
    assert float(sum(parts)) == pytest.approx(float(whole), abs=1e-6)
    torch.testing.assert_close(grad_parts, grad_whole)
    # two data-parallel ranks of uneven share (3 and 1): the gradient averaging over ranks gives the whole
    ranks = [policy_loss(new[s], old[s], rollout[s], advantages[s], mask[s], supervised[s], world_size=2, **kw)[0] for s in (slice(0, 3), slice(3, 4))]
    (grad_ranks,) = torch.autograd.grad(sum(ranks) / 2, new)
    torch.testing.assert_close(grad_ranks, grad_whole)


def test_supervised_rows_take_plain_negative_log_likelihood():
    new, old, rollout, advantages, mask = _case(2)
    supervised = torch.ones(4, dtype=torch.bool)
    loss, sums = policy_loss(new, old, rollout, advantages, mask, supervised, clip_epsilon=0.2, minibatch_samples=4)
    expected = -((new * mask).sum(1) / mask.sum(1)).mean()
    assert float(loss) == pytest.approx(float(expected), abs=1e-6)
    assert sums.policy_tokens == 0 and sums.tokens == float(mask.sum())
