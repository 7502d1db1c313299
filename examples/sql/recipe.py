"""The SQL agent's recipe: its LangGraph program, its tasks, and the format its starting policy learns."""

from __future__ import annotations

import random
import sys
from pathlib import Path

from examples.sql import task as sql
from tracerl.trainer.loop.config import LoopConfig
from tracerl.trainer.loop.recipe import AgentRecipe, FormatExample, Task, WarmStartStage
from tracerl.trainer.training.config import TrainConfig


def tasks(seed: int, data: Path | None) -> tuple[list[Task], list[Task]]:
    """Local questions by default; with ``--data``, a Spider file (``dev.json``, ``train_spider.json``)."""
    train, held_out = sql.load_spider(data, seed) if data is not None else sql.all_tasks(seed)
    return [t.to_json() for t in train], [t.to_json() for t in held_out]


def random_query(task: sql.Task, schema: dict[str, list[str]], rng: random.Random) -> str:
    """A query of the right shape on a random table and column of the schema, the question's value kept."""
    table = rng.choice(sorted(schema))
    columns = [c for c in schema[table] if c != sql.WHERE_COLUMN] or schema[table]
    return sql.query_text(table, rng.choice(columns), task.where_value)


def warm_start(train: list[Task], seed: int, n: int = 1200) -> list[WarmStartStage]:
    """Teach the format, not the task: writer and rewriter turns query a random table and column of
    the schema (keeping the question's value), checker turns answer yes or no at random.

    The queries run, so the checker and rewriter see the results the agent would show them.
    """
    rng = random.Random(seed)
    schemas: dict[str, dict[str, list[str]]] = {}
    queries, verdicts = [], []
    for _ in range(n):
        task = sql.Task(**rng.choice(train))
        schema = schemas.setdefault(task.db_path, sql.read_schema(task.db_path))
        text = sql.schema_text(task.db_path)
        first = random_query(task, schema, rng)
        result = sql.result_text(sql.execute(task.db_path, first))
        queries.append(FormatExample(sql.writer_messages(task.question, text), first))
        verdicts.append(FormatExample(sql.checker_messages(task.question, text, first, result), rng.choice(sql.VERDICTS)))
        queries.append(FormatExample(sql.rewriter_messages(task.question, text, first, result), random_query(task, schema, rng)))
    return [WarmStartStage(queries, max_epochs=6, stop_below_loss=0.2), WarmStartStage(queries + verdicts, max_epochs=2)]


def tokenizer_corpus() -> tuple[str, ...]:
    """The prompts' and queries' words, so each name, synonym and value is a token or two."""
    train, held_out = sql.all_tasks(0)
    corpus = []
    for task in train + held_out:
        text = sql.schema_text(task.db_path)
        corpus += [sql.WRITER_SYSTEM.format(schema=text), sql.CHECKER_SYSTEM.format(schema=text),
                   sql.REWRITER_SYSTEM.format(schema=text), task.question, task.gold]
    return tuple(corpus)


RECIPE = AgentRecipe(
    name="sql",
    title="SQL agent (LangGraph writer/checker/rewriter), tiny model",
    agent_argv=(sys.executable, "-m", "examples.sql.agent"),
    tasks=tasks,
    warm_start=warm_start,
    tokenizer_corpus=tokenizer_corpus(),
    version=2,
    defaults=LoopConfig(
        out=Path("runs/sql"), rounds=8, tasks_per_round=32, group_size=4, eval_tasks=100, agents="writer,rewriter",
        train=TrainConfig(learning_rate=5e-4),
    ),
)
