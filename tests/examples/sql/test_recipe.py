"""The recipe's warm start teaches the format only: the table and column it writes are random, never the task's."""

from __future__ import annotations

from collections import Counter

import pytest

from examples.sql import task as sql
from examples.sql.recipe import tasks, warm_start


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACERL_CACHE_DIR", str(tmp_path / "cache"))


def test_warm_start_writes_random_tables_and_columns_in_the_query_format_on_training_tasks_only():
    train, held_out = tasks(0, None)
    stages = warm_start(train, seed=0, n=600)
    by_question = {t["question"]: sql.Task(**t) for t in train}
    held_out_questions = {t["question"] for t in held_out}
    right, queries, verdicts = 0, 0, Counter()
    for example in stages[-1].examples:
        question = next(m["content"] for m in example.messages if m["role"] == "user")
        assert question not in held_out_questions
        if example.messages[0]["content"].startswith("Check"):
            verdicts[example.target] += 1
            continue
        task = by_question[question]
        queries += 1
        # the format: one column of one table of the schema, the question's value in WHERE; the query runs
        _, column, _, table, *_ = example.target.split()
        assert column in sql.read_schema(task.db_path)[table]
        assert example.target == sql.query_text(table, column, task.where_value)
        sql.execute(task.db_path, example.target)
        right += sql.reward(task, example.target)
    # the choice is random: about one query in five is right (2-3 tables of 2 columns), as the starting policy's
    assert 0.1 < right / queries < 0.35
    assert set(verdicts) == set(sql.VERDICTS) and min(verdicts.values()) > 0.35 * sum(verdicts.values())
