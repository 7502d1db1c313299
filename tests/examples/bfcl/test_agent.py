"""The function-calling agent in the real loop, on a user's own questions file in BFCL's format: under
`tracerl run` against the built-in server, one LLM call per question with the question's functions and
the worked examples' offered as tools, the leaderboard's verdict on a span of its own and as the reward,
and a round whose groups all earned the same trains on nothing (--drop-zero-advantage) and says so."""

from __future__ import annotations

import json

import pytest

from tracerl_testing.installed import require_module
from examples.bfcl import task as bfcl
from examples.bfcl.agent import VERDICT_SPAN
from examples.bfcl.recipe import RECIPE, verdicts
from tracerl.orchestration.local.config import LocalConfig
from tracerl.orchestration.local.run import run_local
from tracerl.schemas import attributes as A
from tracerl.trainer.training.config import TrainConfig
from tracerl_testing.tables import span_rows

require_module("bfcl_eval", bfcl.INSTALL_HINT)
pytestmark = [pytest.mark.slow]

OPERATIONS = ("add", "subtract", "multiply", "divide", "power", "modulo", "maximum", "minimum")


def question(i: int, operation: str) -> dict:
    """A short question of the user's own, in BFCL's format (dotted names, BFCL's "dict")."""
    schema = {"type": "dict", "properties": {"a": {"type": "integer", "description": "first"}, "b": {"type": "integer", "description": "second"}},
              "required": ["a", "b"]}
    return {"id": f"mine_{operation}_{i}", "question": [[{"role": "user", "content": f"{operation} {i} and {i + 1}"}]],
            "function": [{"name": f"math.{operation}", "description": f"{operation} two numbers", "parameters": schema}],
            "ground_truth": [{f"math.{operation}": {"a": [i], "b": [i + 1]}}]}


@pytest.fixture(scope="module")
def one_round(tiny_checkpoint, tmp_path_factory):
    data = tmp_path_factory.mktemp("data") / "mine.jsonl"
    data.write_text("".join(json.dumps(question(i, op)) + "\n" for op in OPERATIONS for i in range(2)))
    out = tmp_path_factory.mktemp("run")
    cfg = LocalConfig(out=out, rounds=1, tasks_per_round=4, group_size=2, eval_tasks=8, seed=0, model=str(tiny_checkpoint), data=data,
                      concurrency=4, max_tokens=16, drop_zero_advantage=True, train=TrainConfig(epochs=1, minibatch_size=8))
    return out, run_local(RECIPE, cfg)


def test_each_question_is_one_call_offering_its_functions_and_the_examples_scored_by_the_checker(one_round):
    out, rows = one_round
    spans = span_rows(out / "rounds" / "000" / "data")
    calls = [s for s in spans if s["prompt_token_ids"] is not None]
    episodes = {s["episode_id"] for s in spans if s["episode_id"]}
    assert len(calls) == len(episodes) == 4 + 4 * 2  # held out: a quarter of 16; training: 4 questions x 2
    lines = [json.loads(line) for line in (out / "rounds" / "000" / "tasks.jsonl").read_text().splitlines()]
    examples = {f"math_{e['question'][0]['content'].split()[0]}" for e in lines[0]["examples"]}
    assert len(examples) == 2 and all(line["examples"] == lines[0]["examples"] for line in lines)
    for call in calls:
        offered = [tool["name"] for tool in json.loads(json.loads(call["attributes"])[A.GEN_AI_TOOL_DEFINITIONS])]
        own = json.loads(json.loads(call["attributes"])[A.GEN_AI_INPUT_MESSAGES])[-1]["parts"][0]["content"].split()[0]
        # its own first (dots replaced), then the two examples' (once: an example may ask for the same function)
        assert offered[0] == f"math_{own}" and len(set(offered)) == len(offered) == len({f"math_{own}", *examples})
    rewards = {s["episode_id"]: s for s in spans if s["name"] == A.REWARD_SPAN_NAME}
    judged = {s["episode_id"]: json.loads(s["attributes"]) for s in spans if s["name"] == VERDICT_SPAN}
    assert set(rewards) == set(judged) == episodes
    for episode, verdict in judged.items():  # an untrained model: its answers are no calls the checker passes
        assert verdict["bfcl.category"] == "mine" and not verdict["bfcl.valid"]
        assert rewards[episode]["reward_value"] == 0.0
    assert [v["task_id"] for v in verdicts(out / "rounds" / "000" / "data" / "spans")] == sorted(
        s["task_id"] for s in spans if s["name"] == VERDICT_SPAN and s["split"] == "test")


def test_a_round_whose_groups_all_earned_the_same_trains_on_nothing_and_says_so(one_round):
    _, rows = one_round
    first = rows[0]
    assert first["task_groups"] == 4 and first["groups_with_signal"] == 0
    assert first["status"] == "skipped" and first["zero_advantage_dropped"] == 8 and "advantage 0" in first["reason"]
    assert rows[1]["policy_version"] == 0  # nothing was published
