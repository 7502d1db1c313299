"""The Agents SDK retrieval agent in the real loop: under `tracerl run` against the built-in server,
its searches run over the BM25 index, every episode is scored once, and the warm start is
taught on exactly the prompts the agent sends."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

from examples.rag import task as rag
from examples.rag.recipe import RECIPE, search_call, warm_start
from tracerl.schemas import attributes as A
from tracerl.orchestration.local.config import LocalConfig
from tracerl.orchestration.local.run import run_local
from tracerl.orchestration.local.recipe import FormatExample
from tracerl.orchestration.local.warm_start import supervised_samples
from tracerl.trainer.serving import tool_parser
from tracerl.trainer.training.config import TrainConfig
from tracerl.trainer.training.dataset import read_dataset
from tracerl.trainer.training.torch_backend import PolicyTrainer
from tracerl_testing.tables import span_rows

pytestmark = [pytest.mark.slow, pytest.mark.frameworks]


def right_episode(task: dict, corpus) -> list[FormatExample]:
    """The two searches and the answer that solve ``task``, each turn as the agent will ask for it."""
    org = task["question"].split("the founder of ")[1].removesuffix(" born?").removesuffix(" attend?")
    first = rag.search_output(corpus, org)
    founder = first.splitlines()[0].split(" by ")[1].split(".")[0]
    searches = [(org, first), (founder, rag.search_output(corpus, founder))]
    tools = warm_start([task], seed=0, episodes=1)[0].examples[0].tools
    return [
        FormatExample(rag.after_searches(task["question"], searches[:0]), search_call(org), tools),
        FormatExample(rag.after_searches(task["question"], searches[:1]), search_call(founder), tools),
        FormatExample(rag.after_searches(task["question"], searches), rag.answer_text(task["answers"][0]), tools),
    ]


@pytest.fixture(scope="module")
def searching_model(teach_tiny_model) -> Path:
    """A tiny model taught (supervised) the right searches for the training tasks, so episodes make several calls."""
    train, _ = rag.all_tasks(seed=0)
    corpus = rag.open_corpus(train[0]["corpus"])
    examples = [example for task in train for example in right_episode(task, corpus)]
    return teach_tiny_model(RECIPE, examples, epochs=8)  # the format is learned by then (loss ~0.25)


@pytest.fixture(scope="module")
def one_round(searching_model, tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    cfg = LocalConfig(
        out=out, rounds=1, tasks_per_round=3, group_size=2, eval_tasks=2, seed=0, model=str(searching_model),
        concurrency=4, train=TrainConfig(epochs=1, minibatch_size=8),
    )
    return out, run_local(RECIPE, cfg)


def episodes(round_dir: Path) -> dict[str, list[dict]]:
    """Each episode's spans in start order."""
    by_episode = defaultdict(list)
    for row in span_rows(round_dir / "data"):
        if row["episode_id"]:
            by_episode[row["episode_id"]].append(row)
    return by_episode


def test_one_round_searches_scores_every_episode_once_and_trains_on_every_call(one_round):
    out, rows = one_round
    assert [r["round"] for r in rows] == [0, 1] and rows[0]["loss"] is not None
    round_dir = out / "rounds" / "000"
    spans = episodes(round_dir)
    assert len(spans) == 2 + 3 * 2  # held-out greedily, training tasks twice each
    train_calls = 0
    for episode in spans.values():
        calls = [s for s in episode if s["prompt_token_ids"] is not None]
        rewards = [s for s in episode if s["reward_value"] is not None]
        assert 1 <= len(calls) <= 4 and {c["agent_name"] for c in calls} == {"rag"}
        assert len(rewards) == 1 and 0.0 <= rewards[0]["reward_value"] <= 1.0
        assert sum(s["name"] == "execute_tool search" for s in episode) >= 1  # the Agents SDK's tool span, kept by tracerl
        train_calls += len(calls) * (calls[0]["split"] == "train")
    assert rows[0]["transitions"] == train_calls
    samples, _ = read_dataset(round_dir / "dataset")
    assert len(samples) == train_calls


def test_the_warm_start_is_taught_on_the_prompts_the_agent_sends(one_round, searching_model):
    """Rebuild each captured call's messages from the episode's earlier replies (as the warm
    start builds its examples) and render them as the warm start does: the token ids must be
    the ones the agent's request really had."""
    out, _ = one_round
    round_dir = out / "rounds" / "000"
    questions = {line["task_id"]: line for line in map(json.loads, (round_dir / "tasks.jsonl").read_text().splitlines())}
    tokenizer = PolicyTrainer(searching_model, TrainConfig()).tokenizer
    corpus = rag.open_corpus(next(iter(questions.values()))["corpus"])
    tools = warm_start(list(questions.values()), seed=0, episodes=1)[0].examples[0].tools
    compared = 0
    for episode in episodes(round_dir).values():
        calls = [s for s in episode if s["prompt_token_ids"] is not None]
        task = questions[calls[0]["task_id"]]
        searches: list[tuple[str, str]] = []
        for call in calls:
            # the tiny model's chat template shows no tool list, a real model's does: compare it as sent
            assert json.loads(json.loads(call["attributes"])[A.GEN_AI_TOOL_DEFINITIONS]) == [{"type": "function", **t["function"]} for t in tools]
            expected = supervised_samples(tokenizer, [FormatExample(rag.after_searches(task["question"], searches), "", tools)])
            assert call["prompt_token_ids"] == expected[0].prompt_token_ids
            compared += 1
            parsed = tool_parser.parse(tokenizer.decode(call["completion_token_ids"], skip_special_tokens=True))
            if parsed is None:
                break
            query = json.loads(parsed.tool_calls[0]["function"]["arguments"])["query"]
            searches.append((query, rag.search_output(corpus, query)))
    assert compared > len(episodes(round_dir))  # later turns, after searches, were compared too
