"""benchmarks/sql_held_out.py: what the SQL writer's held-out queries got, counted from a run's spans."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from examples.sql import task as sql
from examples.sql.recipe import held_out_first_queries, held_out_skill
from tracerl.schemas import attributes as A
from tracerl_testing.span_builders import llm_call, write_spans

REPO = Path(__file__).resolve().parents[2]


def writer_call(episode: str, span_id: str, at: int, task: sql.Task, query: str, split: str = "test", agent: str = "writer") -> dict:
    schema = sql.schema_text(task.db_path)
    prompt = json.dumps([{"role": "system", "parts": [{"type": "text", "content": sql.WRITER_SYSTEM.format(schema=schema)}]}])
    answer = json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": query}]}])
    return llm_call(episode, span_id, at, at + 5, [1], [2], agent=agent, task=task.task_id,
                    extra={A.GEN_AI_INPUT_MESSAGES: prompt, A.GEN_AI_OUTPUT_MESSAGES: answer, A.SPLIT: split})


def test_each_held_out_first_query_is_counted_by_what_it_got(tmp_path):
    held_out = sql.all_tasks(0)[1]
    gold, table_and_column, table_only, other = held_out[:4]
    column, table = sql.GOLD_FORM.match(table_and_column.gold).groups()
    spans = [
        writer_call("e1", "w1", 10, gold, gold.gold),
        writer_call("e1", "w2", 30, gold, "SELECT nothing FROM nowhere"),      # a later writer call of the same episode: not its first
        writer_call("e2", "w1", 10, table_and_column, f"SELECT {column} FROM {table} WHERE name = 'nobody'"),
        writer_call("e3", "w1", 10, table_only, f"SELECT name FROM {sql.GOLD_FORM.match(table_only.gold).group(2)} WHERE name = 'x'"),
        writer_call("e4", "w1", 10, other, "SELECT pay FROM tutor"),
        writer_call("e5", "w1", 10, gold, gold.gold, split="train"),            # training episodes are not held out
        writer_call("e6", "w1", 5, other, other.gold, agent="rewriter"),        # nor other nodes' calls
    ]
    run = tmp_path / "rl-seed0"
    write_spans(run / "rounds" / "000" / "data", spans)

    firsts = held_out_first_queries(run / "rounds" / "000" / "data" / "spans")
    assert sorted(q for _, _, q in firsts) == sorted([gold.gold, f"SELECT {column} FROM {table} WHERE name = 'nobody'",
                                                      f"SELECT name FROM {sql.GOLD_FORM.match(table_only.gold).group(2)} WHERE name = 'x'",
                                                      "SELECT pay FROM tutor"])
    assert held_out_skill(run / "rounds" / "000" / "data" / "spans").shown == 3  # all but the tutor, which no schema has

    printed = subprocess.run([sys.executable, "benchmarks/sql_held_out.py", str(run)], cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert "| rl-seed0 | 0 | 1 | 1 | 1 | 1 |" in printed
