"""The LangGraph SQL agent in the real loop: under `tracerl run` against the built-in server,
each node's calls named after it, only the writer's and rewriter's calls trained, and the
warm start taught on exactly the prompts the agent sends."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from examples.sql import task as sql
from examples.sql.agent import sql_db_query
from examples.sql.recipe import RECIPE
from tracerl.pipeline.messages import chat_messages
from tracerl.schemas import attributes as A
from tracerl.orchestration.local.config import LocalConfig
from tracerl.orchestration.local.run import run_local
from tracerl.orchestration.local.recipe import FormatExample
from tracerl.orchestration.local.warm_start import supervised_samples
from tracerl.trainer.training.config import TrainConfig
from tracerl.trainer.training.dataset import read_dataset
from tracerl.trainer.training.torch_backend import PolicyTrainer
from tracerl_testing.tables import span_rows

pytestmark = [pytest.mark.slow, pytest.mark.frameworks]


@pytest.fixture(scope="module")
def rejecting_model(teach_tiny_model) -> Path:
    """A tiny model taught (supervised, on the agent's own prompts) to write queries and to
    answer every check with "no", so each episode runs writer, checker and rewriter."""
    train, _ = sql.all_tasks(seed=0)
    examples = []
    for task in train:
        schema = sql.schema_text(task.db_path)
        result = sql.result_text(sql.execute(task.db_path, task.gold))
        examples += [
            FormatExample(sql.writer_messages(task.question, schema), task.gold),
            FormatExample(sql.checker_messages(task.question, schema, task.gold, result), "no"),
            FormatExample(sql.rewriter_messages(task.question, schema, task.gold, result), task.gold),
        ]
    return teach_tiny_model(RECIPE, examples, epochs=4)


@pytest.fixture(scope="module")
def one_round(rejecting_model, tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    cfg = LocalConfig(
        out=out, rounds=1, tasks_per_round=3, group_size=2, eval_tasks=2, seed=0, model=str(rejecting_model),
        agents="writer,rewriter", concurrency=4, train=TrainConfig(epochs=1, minibatch_size=8),
        agent_args=("--examples", "0", "--partial-credit"),  # the warm start's prompts: a --model gets worked examples by default
    )
    rows = run_local(RECIPE, cfg)
    return out, rows


def llm_calls(round_dir: Path) -> list[dict]:
    return [r for r in span_rows(round_dir / "data") if r["prompt_token_ids"] is not None]


def test_one_round_runs_writer_checker_rewriter_and_trains_only_writer_and_rewriter(one_round):
    out, rows = one_round
    assert [r["round"] for r in rows] == [0, 1]
    calls = llm_calls(out / "rounds" / "000")
    agents = [c["agent_name"] for c in calls]
    assert set(agents) == {"writer", "checker", "rewriter"}
    assert agents.count("writer") == 2 + 3 * 2  # one per episode: held-out and training
    trained = [c for c in calls if c["split"] == "train" and c["agent_name"] != "checker"]
    samples, _ = read_dataset(out / "rounds" / "000" / "dataset")
    assert rows[0]["transitions"] == len(samples) == len(trained)
    assert sorted(s.prompt_token_ids for s in samples) == sorted(c["prompt_token_ids"] for c in trained)
    tools = [r for r in span_rows(out / "rounds" / "000" / "data") if r["name"] == f"{A.GEN_AI_EXECUTE_TOOL} sql_db_query"]
    assert len(tools) == sum(a != "checker" for a in agents)  # every query written ran as a tool
    assert (out / "policy" / "v1" / "config.json").exists()


def test_with_partial_credit_an_episode_that_misses_the_gold_rows_also_earns_its_schema_link_credit(one_round):
    out, _ = one_round
    rewards: dict[str, dict[str, float]] = {}
    for row in span_rows(out / "rounds" / "000" / "data"):
        if row["name"] == A.REWARD_SPAN_NAME:
            rewards.setdefault(row["episode_id"], {})[row["reward_name"]] = row["reward_value"]
    assert len(rewards) == 2 + 3 * 2 and all("execution_match" in r for r in rewards.values())
    missed = {e for e, r in rewards.items() if r["execution_match"] == 0.0}
    assert {e for e, r in rewards.items() if "schema_link" in r} == missed
    assert {r["schema_link"] for r in rewards.values() if "schema_link" in r} <= {0.0, 0.25, 0.5}


def test_warm_start_prompts_are_the_prompts_the_agent_sends(one_round, rejecting_model):
    """Every captured prompt, rebuilt from its task and the calls before it, renders through the
    warm start's own code to the very token ids the server received."""
    out, _ = one_round
    tokenizer = PolicyTrainer(rejecting_model, TrainConfig()).tokenizer
    train, held_out = RECIPE.tasks(0, None)
    tasks = {t["task_id"]: sql.Task(**t) for t in train + held_out}
    episodes: dict[str, list[dict]] = {}
    for call in llm_calls(out / "rounds" / "000"):
        episodes.setdefault(call["episode_id"], []).append(call)
    checked = set()
    for calls in episodes.values():
        task = tasks[calls[0]["task_id"]]
        schema, query, result = sql.schema_text(task.db_path), None, None
        for call in calls:
            if call["agent_name"] == "writer":
                messages = sql.writer_messages(task.question, schema)
            elif call["agent_name"] == "checker":
                messages = sql.checker_messages(task.question, schema, query, result)
            else:
                messages = sql.rewriter_messages(task.question, schema, query, result)
            [sample] = supervised_samples(tokenizer, [FormatExample(messages, "")])
            assert sample.prompt_token_ids == call["prompt_token_ids"], call["agent_name"]
            checked.add(call["agent_name"])
            if call["agent_name"] != "checker":
                answer = chat_messages(json.loads(call["attributes"])[A.GEN_AI_OUTPUT_MESSAGES])[0]["content"]
                query = sql.clean_query(answer)
                result = sql_db_query.invoke({"query": query, "db_path": task.db_path})
    assert checked == {"writer", "checker", "rewriter"}

    # and the recipe's warm start asks the writer exactly these prompts for the same tasks
    stages = RECIPE.warm_start(train, 0)
    taught = {tuple(s.prompt_token_ids) for stage in stages for s in supervised_samples(tokenizer, stage.examples)}
    writer_prompts = {tuple(c["prompt_token_ids"]) for c in llm_calls(out / "rounds" / "000") if c["agent_name"] == "writer"}
    train_writer_prompts = {p for p, c in ((tuple(c["prompt_token_ids"]), c) for c in llm_calls(out / "rounds" / "000"))
                            if c["agent_name"] == "writer" and c["split"] == "train"}
    assert train_writer_prompts and train_writer_prompts <= taught
    assert writer_prompts - train_writer_prompts  # held-out questions: never taught
    assert not (writer_prompts - train_writer_prompts) & taught
