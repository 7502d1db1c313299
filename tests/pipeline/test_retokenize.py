"""``--retokenize``: calls captured without token ids train on ids rebuilt from their messages, marked as such."""

from __future__ import annotations

import json

import pytest
from transformers import AutoTokenizer

from tracerl.core.chat_template import template_prompt_ids
from tracerl.pipeline import PipelineInputError, build_dataset, dataset_table
from tracerl.schemas import attributes as A
from tracerl_testing.span_builders import episode_span, llm_call, reward_span, write_spans

QUESTION = [{"role": "user", "parts": [{"type": "text", "content": "What is 6*7?"}]}]


def _answer(text: str, finish_reason: str) -> str:
    return json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": text}], "finish_reason": finish_reason}])


@pytest.fixture
def spans(data_dir):
    """e1: one call with served ids, one without (messages only), one without ids or messages."""
    messages = {A.GEN_AI_INPUT_MESSAGES: json.dumps(QUESTION), A.GEN_AI_OUTPUT_MESSAGES: _answer("42", "stop")}
    cut = {A.GEN_AI_INPUT_MESSAGES: json.dumps(QUESTION), A.GEN_AI_OUTPUT_MESSAGES: _answer("4", "length")}
    no_content = {A.GEN_AI_INPUT_MESSAGES: None, A.GEN_AI_OUTPUT_MESSAGES: None}
    write_spans(data_dir, [
        episode_span("e1", 0, 100, task="t"),
        llm_call("e1", "served", 1, 10, [1, 2], [3]),
        llm_call("e1", "messages-only", 11, 20, None, None, extra=messages),
        llm_call("e1", "cut-short", 21, 30, None, None, extra=cut),
        llm_call("e1", "nothing", 31, 40, None, None, extra=no_content),
        reward_span("e1", "r", 50, 1.0),
    ])
    return data_dir


def test_calls_without_token_ids_stay_out_by_default(spans, tmp_path):
    manifest = build_dataset(spans, tmp_path / "ds")
    assert manifest["counts"]["llm_calls"]["skipped"] == {"no_token_ids": 3}
    assert any("--retokenize MODEL_FOLDER" in w for w in manifest["warnings"])
    assert [r["token_source"] for r in dataset_table(tmp_path / "ds").to_pylist()] == ["served"]


def test_retokenize_rebuilds_ids_from_the_messages_with_the_policys_chat_template(spans, tmp_path, tiny_checkpoint):
    manifest = build_dataset(spans, tmp_path / "ds", retokenize=str(tiny_checkpoint))
    rows = {r["step"]: r for r in dataset_table(tmp_path / "ds").to_pylist()}
    tokenizer = AutoTokenizer.from_pretrained(tiny_checkpoint)
    prompt = template_prompt_ids(tokenizer, [{"role": "user", "content": "What is 6*7?"}])
    answer = tokenizer("42", add_special_tokens=False)["input_ids"]
    assert rows[0]["token_source"] == "served" and rows[0]["prompt_token_ids"] == [1, 2]
    assert rows[1]["token_source"] == "retokenized" and rows[1]["prompt_token_ids"] == prompt
    assert rows[1]["response_token_ids"] == [*answer, tokenizer.eos_token_id]  # it stopped: the server sampled the eos
    assert rows[1]["response_logprobs"] is None and rows[1]["response_mask"] == [1] * len(rows[1]["response_token_ids"])
    # cut at the token limit: no end-of-sequence was sampled
    assert rows[2]["response_token_ids"] == tokenizer("4", add_special_tokens=False)["input_ids"]
    # a call with neither ids nor messages cannot be rebuilt: still skipped, still counted
    assert 3 not in rows
    assert manifest["counts"]["llm_calls"]["retokenized"] == 2
    assert manifest["counts"]["llm_calls"]["retokenized_from_text"] == 0  # plain text renders through the template
    assert manifest["counts"]["llm_calls"]["skipped"] == {"no_token_ids": 1}
    assert any("2 transition(s) have token ids rebuilt" in w for w in manifest["warnings"])


def test_a_folder_without_a_tokenizer_or_no_folder_at_all_is_named(spans, tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(PipelineInputError, match=r"--retokenize .*empty: no tokenizer could be loaded"):
        build_dataset(spans, tmp_path / "ds", retokenize=str(tmp_path / "empty"))
    with pytest.raises(PipelineInputError, match=r"--retokenize .*nowhere: no such folder"):
        build_dataset(spans, tmp_path / "ds", retokenize=str(tmp_path / "nowhere"))


def test_prompts_are_rebuilt_from_the_messages_as_the_request_carried_them():
    """A tool call goes back to the template as the request's ``tool_calls``, its result as a ``tool`` message
    with the call's id: the template then renders them as the server did (on SmolLM2 with vLLM, prompt for
    prompt: tests/examples/calc/test_smollm2.py)."""
    from tracerl.pipeline.messages import request_messages

    recorded = json.dumps([
        {"role": "user", "parts": [{"type": "text", "content": "6*7?"}], "name": "user"},
        {"role": "assistant", "parts": [{"type": "tool_call", "id": "c0", "name": "calculator", "arguments": '{"expression": "6*7"}'}]},
        {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c0", "response": "42"}]},
    ])
    assert request_messages(recorded) == [
        {"role": "user", "content": "6*7?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c0", "type": "function", "function": {"name": "calculator", "arguments": '{"expression": "6*7"}'}}]},
        {"role": "tool", "tool_call_id": "c0", "content": "42"},
    ]
    flattened = json.dumps([{"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "name": "f", "arguments": {"a": 1}}]}])
    assert request_messages(flattened)[0]["tool_calls"][0]["function"] == {"name": "f", "arguments": '{"a": 1}'}
