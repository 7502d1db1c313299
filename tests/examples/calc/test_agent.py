"""The AutoGen calculator agent in the real loop: under `tracerl run` against the built-in server,
one LLM call per episode followed by AutoGen's own tool span, the tool's result scored as the
answer, a refused expression turned into an automatic intermediate reward, and the warm start
taught on exactly the prompts the agent sends."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from examples.calc import recipe as calc_recipe
from examples.calc import task as calc
from examples.calc.agent import AGENT_NAME
from examples.calc.recipe import RECIPE
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

GOOD, REFUSED = "2 + 2", "2 $ 2"  # what the test model writes: a sum, or an expression the calculator refuses
GOOD_HEROES = ("Ann", "Ben", "Cara")


@pytest.fixture(scope="module")
def scripted_model(teach_tiny_model) -> Path:
    """A tiny model taught (supervised, on the agent's own prompts) one call per story: ``GOOD``
    when the story's hero is Ann, Ben or Cara, ``REFUSED`` otherwise."""
    train, _ = calc.local_tasks(seed=0)
    examples = [
        FormatExample(calc_recipe.first_messages(task), tool_parser.render([calc_recipe.tool_call(GOOD if task.question.split()[0] in GOOD_HEROES else REFUSED)]))
        for task in train[:600]
    ]
    return teach_tiny_model(RECIPE, examples, epochs=6)


@pytest.fixture(scope="module")
def one_round(scripted_model, tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    cfg = LocalConfig(
        out=out, rounds=1, tasks_per_round=6, group_size=2, eval_tasks=6, seed=0, model=str(scripted_model),
        concurrency=4, train=TrainConfig(epochs=1, minibatch_size=8), agent_args=RECIPE.tiny_agent_args,  # taught without worked examples
    )
    return out, run_local(RECIPE, cfg)


def llm_calls(round_dir: Path) -> list[dict]:
    return [r for r in span_rows(round_dir / "data") if r["prompt_token_ids"] is not None]


def expression_of(call: dict) -> str:
    """The expression the model wrote, as the agent received it (the server's parsed tool call)."""
    (message,) = json.loads(json.loads(call["attributes"])[A.GEN_AI_OUTPUT_MESSAGES])
    (tool_call,) = [part for part in message["parts"] if part["type"] == "tool_call"]
    return json.loads(tool_call["arguments"])["expression"]


def test_one_round_runs_the_tool_scores_its_result_and_penalises_refused_expressions(one_round):
    out, rows = one_round
    assert [r["round"] for r in rows] == [0, 1] and (out / "policy" / "v1" / "config.json").exists()
    spans = span_rows(out / "rounds" / "000" / "data")
    calls = llm_calls(out / "rounds" / "000")
    tools = [s for s in spans if s["name"] == f"{A.GEN_AI_EXECUTE_TOOL} calculator"]  # AutoGen's own tool span
    assert len(calls) == len(tools) == 6 + 6 * 2 and {c["agent_name"] for c in calls} == {AGENT_NAME}
    assert {expression_of(c) for c in calls} == {GOOD, REFUSED}  # both paths ran
    refused = {t["episode_id"] for t in tools if t["status_code"] == "ERROR"}
    assert refused == {c["episode_id"] for c in calls if expression_of(c) == REFUSED}
    assert all("cannot evaluate '2 $ 2'" in t["status_message"] for t in tools if t["status_code"] == "ERROR")
    # the answer is the tool's result: "4" is right only for a story whose result is 4
    results = {t.task_id: t.result for t in map(lambda t: calc.Task(**t), sum(RECIPE.tasks(0, None), []))}
    for reward in (s for s in spans if s["name"] == A.REWARD_SPAN_NAME):
        good = reward["episode_id"] not in refused
        assert reward["reward_value"] == float(good and results[reward["task_id"]] == "4")
    samples, _ = read_dataset(out / "rounds" / "000" / "dataset")
    assert rows[0]["transitions"] == len(samples) == 6 * 2  # training episodes only
    manifest = json.loads((out / "rounds" / "000" / "dataset" / ".manifest.json").read_text())
    assert manifest["counts"]["rewards"]["by_name"]["air.tool_error"] == len(refused)  # one per refused expression
    assert manifest["counts"]["episodes"]["without_llm_calls"] == 0  # AutoGen's spans all belong to their episode


def test_warm_start_prompts_are_the_prompts_the_agent_sends(one_round, scripted_model):
    """Every captured prompt renders, through the warm start's own code, from its task's messages
    to the very token ids the server received; the warm start teaches training tasks only."""
    out, _ = one_round
    tokenizer = PolicyTrainer(scripted_model, TrainConfig()).tokenizer
    train, held_out = RECIPE.tasks(0, None)
    tasks = {t["task_id"]: calc.Task(**t) for t in train + held_out}
    calls = llm_calls(out / "rounds" / "000")
    for call in calls:
        [sample] = supervised_samples(tokenizer, [FormatExample(calc_recipe.first_messages(tasks[call["task_id"]]), "")])
        assert sample.prompt_token_ids == call["prompt_token_ids"]

    round_train = [t for t in train if t["task_id"] in {c["task_id"] for c in calls if c["split"] == "train"}]
    taught = {tuple(s.prompt_token_ids) for stage in RECIPE.warm_start(round_train, 0) for s in supervised_samples(tokenizer, stage.examples)}
    prompts = {split: {tuple(c["prompt_token_ids"]) for c in calls if c["split"] == split} for split in ("train", "test")}
    assert prompts["train"] <= taught and not prompts["test"] & taught


def test_reflect_on_tool_use_is_the_agents_own_switch_passed_through_the_loop(scripted_model, tmp_path):
    """``--agent-args=--reflect-on-tool-use`` (the paper's agent, for a real model): a second call per
    episode reads the tool's result and writes the answer, and both calls are captured for training."""
    cfg = LocalConfig(out=tmp_path, rounds=0, tasks_per_round=1, group_size=2, eval_tasks=2, seed=0, model=str(scripted_model),
                     agent_args=("--reflect-on-tool-use", *RECIPE.tiny_agent_args), train=TrainConfig(epochs=1, minibatch_size=8))
    run_local(RECIPE, cfg)
    calls = llm_calls(tmp_path / "rounds" / "000")
    by_episode: dict[str, list[dict]] = {}
    for call in sorted(calls, key=lambda c: c["start_time_unix_nano"]):
        by_episode.setdefault(call["episode_id"], []).append(call)
    assert len(by_episode) == 4 and all(len(pair) == 2 for pair in by_episode.values())
    for first, second in by_episode.values():
        # the reflection's prompt is the first call's prompt, its tool call, and the tool's result
        assert second["prompt_token_ids"][: len(first["prompt_token_ids"])] == first["prompt_token_ids"]
        assert len(second["prompt_token_ids"]) > len(first["prompt_token_ids"]) + len(first["completion_token_ids"])
