"""Prompt token ids of chat messages, made the way an OpenAI-compatible server makes them.

The tokenizer's own chat template renders the messages as text (``tokenize=False``) and
that text is encoded once without extra special tokens, as vLLM does: the template holds
the special tokens already. The built-in server builds its prompts with it, and the
pipeline's ``--retokenize`` rebuilds the prompts of calls captured without token ids with
it, so both agree token for token on the same messages.
"""

from __future__ import annotations

from typing import Any


def template_prompt_ids(
    tokenizer: Any, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]] | None = None,
    add_generation_prompt: bool = True, continue_final_message: bool = False,
) -> list[int]:
    """Token ids of ``tokenizer``'s chat template applied to ``messages`` (and ``tools``).

    The template's own errors (jinja's ``TemplateError`` and friends) propagate.
    """
    text = tokenizer.apply_chat_template(
        messages, tools=tools, add_generation_prompt=add_generation_prompt,
        continue_final_message=continue_final_message, tokenize=False,
    )
    return tokenizer(text, add_special_tokens=False)["input_ids"]
