"""The starting policy learns on exactly the prompts the server renders, and its cache is never stale."""

from __future__ import annotations

from tracerl.orchestration.local.recipe import FormatExample
from tracerl.orchestration.local.warm_start import supervised_samples
from tracerl.trainer.serving.prompts import chat_prompt_ids
from tracerl.trainer.serving.protocol import ChatCompletionRequest
from tracerl.trainer.tiny_model import build_tokenizer, tiny_model_key

TOOLS = [{"type": "function", "function": {"name": "calculator", "parameters": {"type": "object", "properties": {}}}}]


def test_prompts_are_rendered_by_the_server_and_a_turn_may_stay_open():
    tokenizer = build_tokenizer()
    messages = [
        {"role": "system", "content": "tools: max"},
        {"role": "user", "content": "task: larger 3 4"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "calculator", "arguments": '{"a": 3}'}}]},
        {"role": "tool", "content": "4", "tool_call_id": "call_1"},
    ]
    closed, started = supervised_samples(tokenizer, [
        FormatExample(messages, "4", tools=TOOLS),
        FormatExample(messages[:2], "larger", ends_turn=False),
    ])
    served = chat_prompt_ids(tokenizer, ChatCompletionRequest(model="policy", messages=messages, tools=TOOLS))
    assert closed.prompt_token_ids == served  # the earlier tool call is shown as the text the model wrote
    assert "<tool_call>" in tokenizer.decode(closed.prompt_token_ids)
    assert closed.response_token_ids[-1] == tokenizer.eos_token_id and closed.target_only
    assert tokenizer.decode(started.response_token_ids) == "larger"  # no end of turn: what follows is not taught


def test_the_cache_key_changes_with_the_tokenizer_corpus():
    assert tiny_model_key() == tiny_model_key(())
    assert tiny_model_key(("SELECT name FROM dogs",)) != tiny_model_key()
