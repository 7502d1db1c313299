"""A tiny causal LM built locally in about a second, so nothing is ever downloaded.

The tokenizer is byte-level BPE trained on a few strings (every byte stays
encodable), the model a small Llama with head_dim 64 (the shape vLLM's CPU kernels
accept) and untied input and output embeddings (vLLM's CPU ``reload_weights`` leaves a
tied output head on the old weights). It is the default policy of ``tracerl serve`` and ``tracerl demo``.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path

from tracerl.instrumentation.agent_env import cache_dir

TINY_MODEL_NAME = "tracerl-tiny-llama"
BUILD_VERSION = 8  # bump when the model recipe changes (the corpus is hashed into the cache key already)

SPECIAL_TOKENS = ["<|endoftext|>", "<|system|>", "<|user|>", "<|assistant|>", "<|tool|>", "<|end|>"]

# A minimal chat format; tool messages are shown to the model as <|tool|> turns.
CHAT_TEMPLATE = (
    "{% for m in messages %}"
    "{% if m['role'] == 'system' %}<|system|>{% elif m['role'] == 'user' %}<|user|>"
    "{% elif m['role'] == 'tool' %}<|tool|>{% else %}<|assistant|>{% endif %}"
    "{{ m['content'] if m['content'] is string else '' }}<|end|>"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
)

_CORPUS = [
    "The agent calls a tool, reads its result and answers.",
    "task: add 3 4 ; tool: add ; result: 7 ; answer: 7",
    "task: diff 9 2 ; tool: diff ; result: 7 ; answer: 7",
    "0 1 2 3 4 5 6 7 8 9 add diff max min mul tools tool result answer task error unknown",
    # repeated so that BPE gives the demo's tool names and digits tokens of their own
    *["max min diff calc math compute", " max min diff calc math compute", "calc", "math", "compute"] * 8,
    *["larger smaller gap", " larger smaller gap", "task: larger", "task: smaller", "task: gap", "max", "min", "diff", "larger max", "smaller min", "gap diff"] * 8,
    *[" ".join("01234567890"), "0123456789"] * 4,
    "SELECT name FROM users WHERE id = 1;",
    '{"name": "calculator", "arguments": {"a": 1, "b": 2}}',
]


def tiny_model_key(corpus: Sequence[str] = ()) -> str:
    """Names what a tiny model is built from (recipe version and tokenizer corpus): a cache keyed by it is never stale."""
    digest = hashlib.sha256("\0".join([*_CORPUS, *corpus]).encode()).hexdigest()[:10]
    return f"tiny{BUILD_VERSION}-{digest}"


def tiny_model_path() -> Path:
    return cache_dir() / f"{TINY_MODEL_NAME}-{tiny_model_key()}"


def build_tokenizer(corpus: Sequence[str] = ()):
    """The byte-level tokenizer; ``corpus`` adds strings an agent's prompts use, so they cost few tokens."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    bpe = ByteLevelBPETokenizer()
    vocab_size = 384 if not corpus else 768
    bpe.train_from_iterator([*_CORPUS, *corpus], vocab_size=vocab_size, min_frequency=1, special_tokens=SPECIAL_TOKENS, show_progress=False)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe._tokenizer,
        eos_token="<|end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        additional_special_tokens=SPECIAL_TOKENS[1:],
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_tiny_model(path: str | os.PathLike, *, seed: int = 0, corpus: Sequence[str] = ()) -> Path:
    """Write a freshly initialised tiny model and its tokenizer (see :func:`build_tokenizer`) to ``path``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()

    torch.manual_seed(seed)
    tokenizer = build_tokenizer(corpus)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,  # head_dim 64
        num_key_value_heads=2,
        # rotary positions, nothing learned per position: a long context costs no weights, and
        # agents asking for max_tokens=2048 fit (`tracerl serve --max-model-len` serves less)
        max_position_embeddings=4096,
        tie_word_embeddings=False,  # see the module docstring: vLLM reloads
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    return save_model_folder(LlamaForCausalLM(config), tokenizer, path)


def save_model_folder(model, tokenizer, path: str | os.PathLike) -> Path:
    """``model`` and ``tokenizer`` as a Hugging Face folder whose generation stops at the tokenizer's end token."""
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def ensure_tiny_model() -> Path:
    """Path of the cached tiny model, building it on first use."""
    path = tiny_model_path()
    if not (path / "config.json").exists():
        tmp = path.with_name(path.name + f".tmp-{os.getpid()}")
        build_tiny_model(tmp)
        try:
            os.replace(tmp, path)
        except OSError:  # another process won the race; its model is as good as ours
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
    return path
