"""``--export sft`` and ``--export dpo``: the scores that give GRPO its advantages also choose
demonstrations (a task's best episode, above a bar) and preference pairs (its best and worst, far
enough apart, on one shared prompt); both load with Hugging Face ``datasets`` and with OpenRLHF's
own SFT and DPO dataset readers."""

from __future__ import annotations

import json
from types import SimpleNamespace

import datasets
import pytest

from tracerl.pipeline import build_dataset
from tracerl.schemas import attributes as A
from tracerl.trainer.tiny_model import build_tokenizer
from tracerl_testing.installed import require_openrlhf
from tracerl_testing.span_builders import episode_span, llm_call, reward_span, write_spans


def _episode(episode: str, task: str, reward: float, answers: list[str], prompt: list[int] | None = None) -> list[dict]:
    """One episode of ``task``: a call per answer (the first on ``prompt``), then its reward."""
    rows = [episode_span(episode, 0, 1000, task=task)]
    for i, answer in enumerate(answers):
        messages = {A.GEN_AI_INPUT_MESSAGES: json.dumps([{"role": "user", "parts": [{"type": "text", "content": f"{task} q{i}"}]}]),
                    A.GEN_AI_OUTPUT_MESSAGES: json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": answer}]}])}
        first_prompt = prompt or [1, 2]
        rows.append(llm_call(episode, f"c{i}", 10 + 20 * i, 20 + 20 * i, first_prompt if i == 0 else [*first_prompt, 9, i],
                             [ord(c) for c in answer], extra=messages))
    return rows + [reward_span(episode, "r", 900, reward)]


@pytest.fixture()
def built(data_dir, tmp_path):
    write_spans(data_dir, [
        *_episode("e1", "t1", 1.0, ["4", "done"]), *_episode("e2", "t1", 0.0, ["5"]), *_episode("e3", "t1", 0.5, ["4?"]),
        *_episode("e4", "t2", 0.2, ["x"]), *_episode("e5", "t2", 0.2, ["y"]),  # below the SFT bar; no margin for a pair
        *_episode("e6", "t3", 1.0, ["a"], prompt=[1, 2]), *_episode("e7", "t3", 0.0, ["b"], prompt=[1, 3]),  # no shared prompt
    ])
    out = tmp_path / "out"
    manifest = build_dataset(data_dir, out, exports=("sft", "dpo"))
    return out, manifest["outputs"]["exports"]


def test_sft_holds_every_call_of_each_tasks_best_episode_above_the_bar(built):
    out, exports = built
    rows = [json.loads(line) for line in (out.parent / "out-sft" / "data.jsonl").read_text().splitlines()]
    assert [(r["episode_id"], r["step"], r["output"][0]["content"]) for r in rows] == [("e1", 0, "4"), ("e1", 1, "done"), ("e6", 0, "a")]
    assert rows[0]["input"] == [{"role": "user", "content": "t1 q0"}] and rows[0]["output"] == [{"role": "assistant", "content": "4"}]
    assert (rows[0]["prompt_token_ids"], rows[0]["response_token_ids"], rows[0]["score"]) == ([1, 2], [ord("4")], 1.0)
    assert exports["sft"] == {"folder": "out-sft", "rows": 3, "episodes": 2, "tasks": 3, "tasks_below_min_reward": 1}


def test_dpo_pairs_the_best_and_the_worst_episode_of_a_task_on_their_shared_first_prompt(built):
    out, exports = built
    [pair] = [json.loads(line) for line in (out.parent / "out-dpo" / "data.jsonl").read_text().splitlines()]
    assert (pair["chosen_episode_id"], pair["rejected_episode_id"], pair["margin"]) == ("e1", "e2", 1.0)
    assert pair["prompt"] == [{"role": "user", "content": "t1 q0"}]
    assert (pair["chosen"], pair["rejected"]) == ([{"role": "assistant", "content": "4"}], [{"role": "assistant", "content": "5"}])
    assert (pair["prompt_token_ids"], pair["chosen_token_ids"], pair["rejected_token_ids"]) == ([1, 2], [ord("4")], [ord("5")])
    assert exports["dpo"] == {"folder": "out-dpo", "rows": 1, "tasks": 3, "tasks_without_pair": 1, "prompt_mismatch": 1}


def test_both_load_with_datasets_and_with_openrlhfs_readers(built):
    require_openrlhf()
    from openrlhf.datasets import RewardDataset, SFTDataset

    out, _ = built
    sft = datasets.load_dataset("parquet", data_files=str(out.parent / "out-sft" / "data.parquet"), split="train")
    dpo = datasets.load_dataset("json", data_files=str(out.parent / "out-dpo" / "data.jsonl"), split="train")
    assert (sft.num_rows, dpo.num_rows) == (3, 1)
    keys = {"input_key": "input", "output_key": "output", "prompt_key": "prompt", "chosen_key": "chosen", "rejected_key": "rejected",
            "apply_chat_template": True}
    strategy = SimpleNamespace(args=SimpleNamespace(data=SimpleNamespace(**keys)))  # the reader reads its options from here
    tokenizer = build_tokenizer()
    read_sft = SFTDataset(sft, tokenizer, 512, strategy, num_processors=1)
    read_dpo = RewardDataset(dpo, tokenizer, 512, strategy, is_dpo=True, num_processors=1)
    assert read_sft.prompts[0].endswith("<|user|>t1 q0<|end|><|assistant|>") and read_sft.responses[0] == "4<|end|>"
    assert (read_dpo.chosens[0], read_dpo.rejects[0]) == ("4<|end|>", "5<|end|>")
