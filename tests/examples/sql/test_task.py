"""The SQL task: local databases and questions, Spider's format, the execution-match reward."""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
from pathlib import Path

import pytest

from examples.sql import task as sql

from tracerl.schemas import environment as E

DATA = Path(__file__).parent / "data"  # a tiny tree in Spider's layout: dev.json, database/<db_id>/<db_id>.sqlite


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    """The local databases are written under the test's own cache folder."""
    monkeypatch.setenv(E.CACHE_DIR_ENV, str(tmp_path / "cache"))


def test_local_tasks_are_seeded_disjoint_and_each_gold_query_returns_one_value():
    train, held_out = sql.all_tasks(seed=3)
    again_train, again_held_out = sql.all_tasks(seed=3)
    assert (train, held_out) == (again_train, again_held_out)
    assert sql.all_tasks(seed=4)[1] != held_out
    assert {t.split for t in train} == {"train"} and {t.split for t in held_out} == {"test"}
    assert not {t.task_id for t in train} & {t.task_id for t in held_out}
    assert len(held_out) == int(0.2 * (len(train) + len(held_out)))
    for t in train + held_out:
        assert len(sql.execute(t.db_path, t.gold)) == 1
        assert sql.reward(t, t.gold) == 1.0


def test_questions_name_table_and_column_by_synonyms_only():
    """The skill to learn: nothing in a question spells out the table or the column it needs."""
    schema_words = {t.name for ts in sql.DATABASES.values() for t in ts} | {
        c.name for ts in sql.DATABASES.values() for t in ts for c in t.columns
    }
    train, held_out = sql.all_tasks(seed=0)
    for t in train + held_out:
        assert not set(re.findall(r"\w+", t.question.lower())) & schema_words, t.question
    # every (table, column) is asked about in both splits, with different names
    pairs = lambda tasks: {tuple(t.task_id.split("-")[:3]) for t in tasks}  # noqa: E731
    assert pairs(train) == pairs(held_out)


def test_schema_and_results_as_the_prompts_show_them():
    sql.make_local_databases()
    path = str(sql.database_path(sql.local_database_root(), "school"))
    assert sql.schema_text(path) == "student(name, age, grade); teacher(name, subject, salary)"
    assert sql.result_text([(3, "a")]) == "3, a"
    assert sql.result_text([]) == "(no rows)"
    assert sql.result_text([(i,) for i in range(7)], limit=2) == "0; 1; ... (7 rows)"


def test_execution_match_compares_rows_as_spider_does():
    train, _ = sql.all_tasks(seed=0)
    t = next(t for t in train if t.gold.startswith("SELECT salary FROM teacher"))
    assert sql.reward(t, t.gold.replace("SELECT salary", "SELECT subject")) == 0.0  # wrong column
    assert sql.reward(t, t.gold.replace("FROM teacher", "FROM student")) == 0.0  # no such column: an error scores 0
    assert sql.reward(t, "not sql") == 0.0
    assert sql.reward(t, t.gold.replace("SELECT salary", "SELECT max(salary)")) == 1.0  # same rows, other query
    assert sql.execution_match(t.db_path, "SELECT name FROM teacher ORDER BY name DESC", "SELECT name FROM teacher")
    assert not sql.execution_match(t.db_path, "SELECT name FROM teacher ORDER BY name DESC", "SELECT name FROM teacher ORDER BY name")


def test_partial_credit_scores_the_gold_table_then_its_column_and_nothing_else():
    train, _ = sql.all_tasks(seed=0)
    task = train[0]  # SELECT <column> FROM <table> WHERE name = '...'
    column, table = re.match(r"SELECT (\w+) FROM (\w+)", task.gold).groups()
    assert sql.schema_link_credit(task, f"SELECT {column.upper()} FROM {table} WHERE name = 'nobody'") == 0.5
    assert sql.schema_link_credit(task, f"SELECT other FROM {table}") == 0.25
    assert sql.schema_link_credit(task, f"SELECT {column} FROM elsewhere") == 0.0
    assert sql.schema_link_credit(task, "The price is 12.") == 0.0
    spider_like = sql.Task("t", task.db_id, task.db_path, task.question, f"SELECT count(*) FROM {table}")
    assert sql.schema_link_credit(spider_like, f"SELECT count FROM {table}") == 0.0  # a gold of another form: no credit


def test_the_agent_cannot_change_the_database():
    train, _ = sql.all_tasks(seed=0)
    table = train[0].gold.split(" FROM ")[1].split()[0]
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        sql.execute(train[0].db_path, f"DELETE FROM {table}")
    assert sql.reward(train[0], train[0].gold) == 1.0


def test_clean_query_drops_fences_and_semicolons():
    assert sql.clean_query("```sql\nSELECT 1;\n```") == "SELECT 1"
    assert sql.clean_query(" SELECT a FROM t; ") == "SELECT a FROM t"


def test_spider_file_loads_with_its_databases_and_gold_queries_that_run():
    train, held_out = sql.load_spider(DATA / "dev.json", seed=0)
    entries = json.loads((DATA / "dev.json").read_text())
    assert len(train) + len(held_out) == len(entries) and len(held_out) == 1
    by_question = {e["question"]: e for e in entries}
    for t in train + held_out:
        entry = by_question[t.question]
        assert (t.db_id, t.gold, t.where_value) == (entry["db_id"], entry["query"], None)
        assert Path(t.db_path) == DATA / "database" / "concert_singer" / "concert_singer.sqlite"
        assert sql.reward(t, t.gold) == 1.0
    count = next(t for t in train + held_out if t.gold == "SELECT count(*) FROM singer")
    assert sql.reward(count, "SELECT count(Name) FROM singer") == 1.0
    assert sql.reward(count, "SELECT count(*) FROM concert") == 0.0


def copy_tree(tmp_path: Path, text: str) -> Path:
    shutil.copytree(DATA / "database", tmp_path / "database")
    path = tmp_path / "dev.json"
    path.write_text(text)
    return path


def test_spider_entry_without_a_key_names_file_line_and_key(tmp_path):
    text = (DATA / "dev.json").read_text().replace('"query": "SELECT count(*) FROM singer",\n', "", 1)
    path = copy_tree(tmp_path, text)
    with pytest.raises(sql.SpiderFormatError, match=rf"{re.escape(str(path))}:2 \(entry 0\): missing or empty query"):
        sql.load_spider(path)


def test_spider_entry_with_a_missing_database_says_where_it_looked(tmp_path):
    entries = json.loads((DATA / "dev.json").read_text())
    entries[2]["db_id"] = "no_such_db"
    path = copy_tree(tmp_path, json.dumps(entries, indent=1))
    with pytest.raises(sql.SpiderFormatError, match=r"dev.json:\d+ \(entry 2\): database 'no_such_db' not found at .*no_such_db.sqlite"):
        sql.load_spider(path)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"db_id": "x"}', r":1: a Spider file is a JSON array"),
        ('[\n {"db_id": "concert_singer", "question": "q", "query": "SELECT 1"},\n {"db_id": oops}\n]', r":3: not valid JSON"),
        ('[\n {"db_id": "concert_singer", "question": "q", "query": "SELECT 1"}\n\n "x"]', r":4: expected ',' or ']'"),
        ("[\n 17\n]", r":2 \(entry 0\): an entry must be an object"),
        ("[]", r"no entries"),
    ],
)
def test_malformed_spider_files_name_the_line(tmp_path, text, message):
    with pytest.raises(sql.SpiderFormatError, match=message):
        sql.load_spider(copy_tree(tmp_path, text))
