"""A model of Qwen2's architecture and chat format, built locally with random weights.

What tests and benchmarks use where a GPU user names a Qwen2.5 hub id: the same model class
(GQA, rotary, RMSNorm), the same chat markup (``<|im_start|>role ... <|im_end|>``) with tools
listed in the system turn and calls written as hermes ``<tool_call>`` blocks, so vLLM's
``--tool-call-parser hermes`` and transformers read it as they read Qwen. Nothing is downloaded:
the tokenizer is byte-level BPE trained on a few strings.

``TINY`` serves on the CPU vLLM (head_dim 64: its CPU attention rejects 16; untied embeddings:
its CPU ``reload_weights`` leaves a tied output head on the old weights). ``QWEN25_15B`` and
``QWEN25_7B`` are Qwen2.5-1.5B- and 7B-Instruct's sizes, for the GPU check.
"""

from __future__ import annotations

from pathlib import Path

QWEN25_15B = dict(
    hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2,
    max_position_embeddings=32768, rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True, vocab_size=151936,
)
QWEN25_7B = dict(
    hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28, num_key_value_heads=4,
    max_position_embeddings=32768, rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=False, vocab_size=152064,
)
TINY = dict(  # 3.4M parameters
    hidden_size=256, intermediate_size=768, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
    max_position_embeddings=4096, rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=False,
)

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# plain added tokens, as in Qwen's tokenizer: kept in decoded text, where the hermes parser finds them
TOOL_MARKUP = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]

# Qwen2.5's chat markup: tools in the system turn, calls as JSON in <tool_call> blocks, results
# as <tool_response> blocks in a user turn. `arguments` may come as a JSON string (OpenAI's shape).
CHAT_TEMPLATE = """\
{%- if tools %}<|im_start|>system
{{ messages[0]['content'] if messages[0]['role'] == 'system' else 'You are a helpful assistant.' }}

# Tools

You are provided with function signatures within <tools></tools> XML tags:
<tools>
{%- for tool in tools %}{{ '\n' + (tool | tojson) }}{% endfor %}{{ '\n' }}</tools>

For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:
<tool_call>
{"name": <function-name>, "arguments": <args-json-object>}
</tool_call><|im_end|>
{% elif messages[0]['role'] != 'system' %}<|im_start|>system
You are a helpful assistant.<|im_end|>
{% endif %}
{%- for m in messages %}
{%- if m['role'] == 'system' %}{% if not tools %}<|im_start|>system
{{ m['content'] }}<|im_end|>
{% endif %}
{%- elif m['role'] == 'tool' %}<|im_start|>user
<tool_response>
{{ m['content'] }}
</tool_response><|im_end|>
{% elif m['role'] == 'assistant' %}<|im_start|>assistant
{{ m['content'] or '' }}
{%- for call in m.get('tool_calls') or [] %}
{%- set f = call['function'] if call['function'] is defined else call %}
<tool_call>
{"name": "{{ f['name'] }}", "arguments": {{ f['arguments'] if f['arguments'] is string else f['arguments'] | tojson }}}
</tool_call>
{%- endfor %}<|im_end|>
{% else %}<|im_start|>{{ m['role'] }}
{{ m['content'] if m['content'] is string else '' }}<|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""

_CORPUS = [
    "You are a helpful assistant.", "# Tools", "<tools></tools>", '{"name": "calculator", "arguments": {"expression": "3 + 4"}}',
    "SELECT name FROM users WHERE id = 1;", "The answer is 7.", "0 1 2 3 4 5 6 7 8 9 + - * / ( )",
]


def build_tokenizer():
    """Byte-level BPE with Qwen's special tokens, tool markup and chat template."""
    from tokenizers import AddedToken, ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(_CORPUS, vocab_size=512, min_frequency=1, special_tokens=SPECIAL_TOKENS, show_progress=False)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe._tokenizer, eos_token="<|im_end|>", pad_token="<|endoftext|>", bos_token=None,
        additional_special_tokens=SPECIAL_TOKENS[1:],
    )
    tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in TOOL_MARKUP])
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_qwen2_model(path: str | Path, shape: dict = TINY, *, seed: int = 0, dtype=None) -> Path:
    """Write a Qwen2ForCausalLM of ``shape`` (random weights, ``seed``) and its tokenizer to ``path``.

    ``shape`` without ``vocab_size`` takes the tokenizer's; ``dtype`` (default float32) is the
    weights' on disk; the model is built on CUDA when one is present, so 1.5B builds in seconds.
    """
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM
    from transformers.utils import logging as hf_logging

    from tracerl.trainer.tiny_model import save_model_folder

    hf_logging.disable_progress_bar()
    torch.manual_seed(seed)
    tokenizer = build_tokenizer()
    config = Qwen2Config(
        **{"vocab_size": len(tokenizer), **shape}, bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype or torch.float32)  # built in its dtype: a 7B model never exists in float32
    try:
        with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
            model = Qwen2ForCausalLM(config)
    finally:
        torch.set_default_dtype(default)
    return save_model_folder(model, tokenizer, path)
