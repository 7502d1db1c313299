"""Per-token log-probs and entropy of a causal LM, without ever holding the full logits.

A real policy's vocabulary is large (Qwen2.5: 152k): the float32 logits of 64 sequences of
1k tokens are ~40 GB before any activation. So the backbone runs once, and the output head,
the log-softmax and the gather run over chunks of about ``chunk`` tokens of the batch (``chunk //
batch`` positions of every row); with gradients each chunk is recomputed in the backward pass
(activation checkpointing), so at most one chunk's logits exist at a time, forward or backward,
whatever the micro-batch. (Chunks of positions alone did not bound it: on an H100 a 1.5B model at
micro-batch 16 x 1k tokens asked for one 9.3 GiB chunk of logits and ran out of memory.)

The head runs only from ``from_position`` on (the trainer passes the batch's first response
position): an agent's prompt is most of its tokens (SmolLM2 on the calc task: ~540 prompt tokens
for ~35 response tokens) and a small model's head is a large share of its compute (SmolLM2: 28M of
~150M multiply-adds a token), so scoring the prompt positions would cost ~20% more for nothing.

Both backends call :func:`token_logprobs`, so the trainer's log-probs are computed one way
whatever trains them; tests compare them with a plain Hugging Face forward.
"""

from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint

DEFAULT_CHUNK = 1024  # tokens whose logits exist at once (x vocab x 4 bytes: 620 MB at 152k, ~3x that with softmax)


def _unwrapped(model: torch.nn.Module) -> torch.nn.Module:
    """The Hugging Face model inside an OpenRLHF Actor or a DeepSpeed engine (PEFT stays: it owns the LoRA layers)."""
    while True:
        inner = getattr(model, "module", None) or (getattr(model, "model", None) if type(model).__name__ == "Actor" else None)
        if inner is None:
            return model
        model = inner


def _chunk_logprobs(hidden: torch.Tensor, targets: torch.Tensor, head: torch.nn.Module, temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    logits = head(hidden).float()
    if temperature != 1.0:
        logits = logits / temperature
    normaliser = torch.logsumexp(logits, dim=-1)
    chosen = torch.gather(logits, -1, targets.unsqueeze(-1)).squeeze(-1) - normaliser
    probs = torch.softmax(logits, dim=-1)
    entropy = normaliser - (probs * logits).sum(-1)
    return chosen, entropy


def token_logprobs(
    model: torch.nn.Module, ids: torch.Tensor, attention: torch.Tensor, *, chunk: int = DEFAULT_CHUNK, with_entropy: bool = False,
    from_position: int = 0, temperature: float = 1.0,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """log pi(token_{t+1} | tokens_{<=t}) for every position of a right-padded batch, shape (B, T-1).

    With ``with_entropy`` also the entropy of each position's distribution (same shape). Positions
    before ``from_position`` are not scored: they hold 0. ``temperature``: the policy is softmax(logits / T), the
    distribution a sampler at temperature T draws from (0 is greedy decoding, whose policy this is not: T=1 then).
    """
    temperature = temperature if temperature > 0 else 1.0
    hf = _unwrapped(model)
    decoder, head = hf.get_decoder(), hf.get_output_embeddings()
    hidden = decoder(input_ids=ids, attention_mask=attention).last_hidden_state[:, from_position:-1]
    targets = ids[:, from_position + 1 :]
    recompute = torch.is_grad_enabled() and hidden.requires_grad
    chosen, entropy = [], []
    positions = max(1, chunk // hidden.shape[0])
    for start in range(0, hidden.shape[1], positions):
        args = (hidden[:, start : start + positions], targets[:, start : start + positions], head, temperature)
        lp, ent = checkpoint(_chunk_logprobs, *args, use_reentrant=False) if recompute else _chunk_logprobs(*args)
        chosen.append(lp)
        entropy.append(ent)
    unscored = hidden.new_zeros((ids.shape[0], from_position), dtype=torch.float32)  # _chunk_logprobs scores in float32
    logprobs = torch.cat([unscored, *chosen], dim=1)
    return (logprobs, torch.cat([unscored, *entropy], dim=1)) if with_entropy else logprobs
