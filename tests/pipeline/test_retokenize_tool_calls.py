"""``--retokenize`` of a response that is a tool call: the ids are the chat template's markup the model wrote
(hermes' ``<tool_call>`` block, the form vLLM's and ``tracerl serve``'s tool parsers read), not the JSON
text the call was recorded as. Checked against the ids a real server sampled for the same conversation."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from transformers import AutoTokenizer

from tracerl.core.chat_template import HERMES_TOOLS_TEMPLATE
from tracerl.pipeline import build_dataset, dataset_table
from tracerl.schemas import attributes as A
from tracerl.schemas import environment as E
from tracerl_testing.span_builders import episode_span, llm_call, reward_span, write_spans

CALCULATOR = {"name": "calculator", "description": "Evaluate an arithmetic expression and return its value.",
              "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}
QUESTION = [{"role": "user", "parts": [{"type": "text", "content": "What is 6 * 7?"}]}]
CALL = [{"role": "assistant", "finish_reason": "tool_calls",
         "parts": [{"type": "tool_call", "id": "c0", "name": "calculator", "arguments": '{"expression": "6 * 7"}'}]}]
# the call as the hermes template teaches it (and the server's tool parser reads it), as the model wrote it
WRITTEN = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "6 * 7"}}\n</tool_call>'


def _rebuilt_response(data_dir: Path, out: Path, tokenizer_folder: Path) -> tuple[list[int], dict[str, Any]]:
    """The response ids ``--retokenize`` gives the one call of CALL, captured without ids, and the build's manifest."""
    messages = {A.GEN_AI_INPUT_MESSAGES: json.dumps(QUESTION), A.GEN_AI_OUTPUT_MESSAGES: json.dumps(CALL),
                A.GEN_AI_TOOL_DEFINITIONS: json.dumps([{"type": "function", **CALCULATOR}])}
    write_spans(data_dir, [episode_span("e1", 0, 100, task="t"), llm_call("e1", "call", 1, 10, None, None, extra=messages),
                           reward_span("e1", "r", 50, 1.0)])
    manifest = build_dataset(data_dir, out, retokenize=str(tokenizer_folder))
    [row] = dataset_table(out).to_pylist()
    assert row["token_source"] == "retokenized"
    return row["response_token_ids"], manifest


@pytest.fixture
def hermes_tokenizer(tmp_path) -> Path:
    """A ChatML tokenizer (``<|im_end|>`` ends a turn and is its eos) with the hermes tool template SmolLM2 is served with."""
    from tracerl_testing.qwen2_model import build_tokenizer

    tokenizer = build_tokenizer()
    tokenizer.chat_template = HERMES_TOOLS_TEMPLATE
    tokenizer.save_pretrained(tmp_path / "hermes")
    return tmp_path / "hermes"


def test_a_tool_call_is_rebuilt_as_the_markup_the_template_teaches(hermes_tokenizer, data_dir, tmp_path):
    tokenizer = AutoTokenizer.from_pretrained(hermes_tokenizer)
    written = tokenizer(WRITTEN, add_special_tokens=False)["input_ids"]
    response, manifest = _rebuilt_response(data_dir, tmp_path / "ds", hermes_tokenizer)
    assert response == [*written, tokenizer.eos_token_id]
    assert manifest["counts"]["llm_calls"]["retokenized_from_text"] == 0
    assert not any("could not render" in w for w in manifest["warnings"])


def test_a_template_without_tool_calls_leaves_the_call_as_json_text(tiny_checkpoint, data_dir, tmp_path):
    """The tiny model's template drops tool calls: rendering would lose the call, so its text is encoded alone,
    and the build counts and names that fallback (those ids are the likeliest to differ from the sampled ones)."""
    tokenizer = AutoTokenizer.from_pretrained(tiny_checkpoint)
    text = json.dumps({"name": "calculator", "arguments": '{"expression": "6 * 7"}'})
    expected = [*tokenizer(text, add_special_tokens=False)["input_ids"], tokenizer.eos_token_id]
    response, manifest = _rebuilt_response(data_dir, tmp_path / "ds", tiny_checkpoint)
    assert response == expected
    assert manifest["counts"]["llm_calls"]["retokenized_from_text"] == 1
    assert any(w.startswith("1 of the retokenized transition(s)") and "could not render" in w for w in manifest["warnings"])


AGENT = """
import json, os, openai, tracerl
tracerl.instrument()
client = openai.OpenAI(base_url=os.environ["BASE_URL"], api_key="none")
messages, tools = json.loads(os.environ["MESSAGES"]), json.loads(os.environ["TOOLS"])
with tracerl.episode(task_id="calc", split="train"):
    reply = client.chat.completions.create(model="m", messages=messages, tools=tools, max_tokens=48, temperature=0)
    call = reply.choices[0].message.tool_calls[0]
    messages += [reply.choices[0].message.model_dump(exclude_none=True), {"role": "tool", "tool_call_id": call.id, "content": "225"}]
    client.chat.completions.create(model="m", messages=messages, tools=tools, max_tokens=48, temperature=0)
    tracerl.emit_reward(1.0)
"""


@pytest.mark.slow  # SmolLM2 (converted once per machine), served on the CPU
def test_rebuilt_ids_of_a_real_models_tool_call_are_the_ids_the_server_sampled(smollm2_folder, tmp_path):
    """SmolLM2-135M-Instruct, shown the calculator agent's worked examples, calls the calculator (greedy) on
    ``tracerl serve``. The agent runs twice, captured by tracerl: once with the server's ids, once without
    (``TRACERL_TOKEN_CAPTURE=off``, as vLLM's Messages API gives none); rebuilt, the second run's ids are the first's."""
    from examples.calc.task import EXAMPLES, SYSTEM_PROMPT, calculator
    from tracerl.trainer.serving.app import running_server

    messages = [{"role": "system", "content": SYSTEM_PROMPT}]
    for i, (example, expression) in enumerate(EXAMPLES):
        call = {"id": f"example_{i}", "type": "function", "function": {"name": "calculator", "arguments": json.dumps({"expression": expression})}}
        messages += [{"role": "user", "content": example}, {"role": "assistant", "content": None, "tool_calls": [call]},
                     {"role": "tool", "tool_call_id": call["id"], "content": calculator(expression)}]
    messages.append({"role": "user", "content": "Ben buys 45 packs of 5 marbles. How many marbles is that in all?"})
    env = {**os.environ, "MESSAGES": json.dumps(messages), "TOOLS": json.dumps([{"type": "function", "function": CALCULATOR}])}
    with running_server(smollm2_folder) as server:
        for run, capture in (("served", "on"), ("messages-only", "off")):
            run_env = {**env, "BASE_URL": server.base_url, E.DATA_DIR_ENV: str(tmp_path / run / "data"), E.TOKEN_CAPTURE_ENV: capture}
            done = subprocess.run([sys.executable, "-c", AGENT], env=run_env, capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, done.stderr
    rows = {}
    for run in ("served", "messages-only"):
        build_dataset(tmp_path / run / "data", tmp_path / run / "ds", retokenize=str(smollm2_folder))
        rows[run] = sorted(dataset_table(tmp_path / run / "ds").to_pylist(), key=lambda r: r["step"])
    assert [r["token_source"] for r in rows["served"]] == ["served"] * 2
    assert [r["token_source"] for r in rows["messages-only"]] == ["retokenized"] * 2
    first = json.loads(rows["messages-only"][0]["output_messages"])[0]
    assert first["finish_reason"] == "tool_calls", first  # the first answer is a tool call
    for served, rebuilt in zip(rows["served"], rows["messages-only"], strict=True):
        assert rebuilt["prompt_token_ids"] == served["prompt_token_ids"]
        assert rebuilt["response_token_ids"] == served["response_token_ids"]
