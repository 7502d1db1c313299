"""Chunked log-probs (logprobs.py) are a plain Hugging Face forward's, with the same gradient."""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM

from tracerl.trainer.training.logprobs import token_logprobs


def _plain(model, ids):
    logits = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits[:, :-1].float()
    return torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None]).squeeze(-1)


def test_chunks_of_any_size_give_the_full_forward_and_its_gradient(tiny_checkpoint):
    model = AutoModelForCausalLM.from_pretrained(tiny_checkpoint, dtype=torch.float32)
    ids = torch.tensor([[10, 11, 12, 13, 40, 41, 42], [20, 21, 22, 23, 24, 25, 26]])
    expected = _plain(model, ids)
    (grad_expected,) = torch.autograd.grad(expected.sum(), model.lm_head.weight)
    for chunk in (1, 4, 1024):
        got, entropy = token_logprobs(model, ids, torch.ones_like(ids), chunk=chunk, with_entropy=True)
        torch.testing.assert_close(got, expected, atol=1e-6, rtol=0)
        (grad,) = torch.autograd.grad(got.sum(), model.lm_head.weight)
        torch.testing.assert_close(grad, grad_expected, atol=1e-6, rtol=1e-5)
        assert entropy.shape == got.shape and bool((entropy > 0).all())


def test_positions_before_the_first_response_are_not_scored(tiny_checkpoint):
    """The trainer starts the head at the batch's first response position: the same values from there on, zeros before,
    and the gradient of what is scored."""
    model = AutoModelForCausalLM.from_pretrained(tiny_checkpoint, dtype=torch.float32)
    ids = torch.tensor([[10, 11, 12, 13, 40, 41, 42], [20, 21, 22, 23, 24, 25, 26]])
    expected = _plain(model, ids)
    (grad_expected,) = torch.autograd.grad(expected[:, 3:].sum(), model.lm_head.weight)
    got, entropy = token_logprobs(model, ids, torch.ones_like(ids), chunk=2, with_entropy=True, from_position=3)
    assert got.shape == entropy.shape == expected.shape
    torch.testing.assert_close(got[:, 3:], expected[:, 3:], atol=1e-6, rtol=0)
    assert not got[:, :3].any() and not entropy[:, :3].any() and bool((entropy[:, 3:] > 0).all())
    (grad,) = torch.autograd.grad(got.sum(), model.lm_head.weight)
    torch.testing.assert_close(grad, grad_expected, atol=1e-6, rtol=1e-5)
