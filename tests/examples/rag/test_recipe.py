"""The warm start teaches the format of searches and answers, never which ones are right."""

from __future__ import annotations

import json

import pytest

from examples.rag import task as rag
from examples.rag.recipe import warm_start
from tracerl.schemas import environment as E
from tracerl.trainer.serving import tool_parser


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(E.CACHE_DIR_ENV, str(tmp_path / "cache"))


def test_warm_start_searches_random_titles_and_answers_random_answers_on_training_tasks():
    train, held_out = rag.all_tasks(seed=0)
    (stage,) = warm_start(train, seed=0, episodes=300)
    held_out_questions = {t["question"] for t in held_out}
    gold = {t["question"]: t["answers"][0] for t in train}
    first_queries, answers, right_queries, right_answers = 0, 0, 0, 0
    for example in stage.examples:
        question = example.messages[1]["content"]
        assert question not in held_out_questions
        parsed = tool_parser.parse(example.target)
        if parsed is not None:  # a search call, as the server parses it into tool_calls
            (call,) = parsed.tool_calls
            assert call["function"]["name"] == rag.TOOL_NAME
            query = json.loads(call["function"]["arguments"])["query"]
            if len(example.messages) == 2:
                first_queries += 1
                right_queries += query in question  # the company the question names
        else:
            answer = rag.extracted_answer(example.target)
            assert answer is not None and example.target == rag.answer_text(answer)
            answers += 1
            right_answers += answer == gold[question]
        searches = (len(example.messages) - 2) // 2
        assert searches <= 2 and (parsed is None or searches < 2)  # one or two searches, then the answer
    assert first_queries == answers == 300
    assert right_queries < 0.05 * first_queries  # ~1/144: a random title, whatever the question
    assert right_answers < 0.15 * answers  # ~1/24: a random training answer
