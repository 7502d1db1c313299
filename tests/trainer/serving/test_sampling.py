"""The server's sampler: exact distribution, temperature, top-p nucleus, greedy."""

from __future__ import annotations

import torch

from tracerl.trainer.serving.engine import SamplingParams, draw_tokens

LOGITS = torch.tensor([2.0, 1.0, 0.5, -1.0, 0.0])


def _frequencies(params: SamplingParams, draws: int = 20_000) -> torch.Tensor:
    """Feed evenly spaced uniforms: the share of each token is then its probability, to 1/draws."""
    uniforms = [(i + 0.5) / draws for i in range(draws)]
    logits = LOGITS.expand(draws, -1)
    tokens = draw_tokens(logits, [params] * draws, uniforms)
    return torch.bincount(torch.tensor(tokens), minlength=len(LOGITS)).float() / draws


def test_samples_follow_softmax_of_logits_over_temperature():
    for temperature in (1.0, 0.5, 1.7):
        expected = torch.softmax(LOGITS / temperature, dim=0)
        torch.testing.assert_close(_frequencies(SamplingParams(max_tokens=1, temperature=temperature)), expected, atol=2e-4, rtol=0)


def test_top_p_keeps_the_smallest_nucleus_and_renormalises():
    probs = torch.softmax(LOGITS, dim=0)  # by size: ids 0 (.56), 1 (.21), 2 (.13), 4 (.08), 3 (.03)
    freq = _frequencies(SamplingParams(max_tokens=1, top_p=0.7))
    nucleus = torch.tensor([probs[0], probs[1], 0, 0, 0])
    torch.testing.assert_close(freq, nucleus / nucleus.sum(), atol=2e-4, rtol=0)
    assert _frequencies(SamplingParams(max_tokens=1, top_p=0.01))[0] == 1.0  # the top token always stays


def test_temperature_zero_is_argmax_whatever_the_uniform():
    rows = torch.stack([LOGITS, LOGITS.flip(0)])
    greedy = SamplingParams(max_tokens=1, temperature=0)
    assert draw_tokens(rows, [greedy, greedy], [0.99, 0.01]) == [0, 4]


def test_rows_with_different_settings_share_one_call():
    rows = torch.stack([LOGITS, LOGITS])
    params = [SamplingParams(max_tokens=1, temperature=0), SamplingParams(max_tokens=1, temperature=1.0)]
    assert draw_tokens(rows, params, [0.999, 0.999]) == [0, 4]  # u near 1 lands on the last id of the CDF
