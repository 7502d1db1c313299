"""The SQL agent's recipe: its LangGraph program, its tasks, and the format its starting policy learns."""

from __future__ import annotations

import json
import random
import sys
from dataclasses import dataclass
from pathlib import Path

from examples.sql import task as sql
from tracerl.orchestration.local.config import LocalConfig
from tracerl.orchestration.local.recipe import AgentRecipe, FormatExample, SkillCount, Task, WarmStartStage, reward_reached
from tracerl.schemas import attributes as A


def tasks(seed: int, data: Path | None) -> tuple[list[Task], list[Task]]:
    """Local questions by default; with ``--data``, a Spider file (``dev.json``, ``train_spider.json``)."""
    train, held_out = sql.load_spider(data, seed) if data is not None else sql.all_tasks(seed)
    return [t.to_json() for t in train], [t.to_json() for t in held_out]


def column_preferences(seed: int) -> dict[str, dict[tuple[str, str], float]]:
    """An arbitrary preference per attribute word over its database's (table, column) pairs.

    The starting policy must not know which column a word means, but its choice must depend
    on the word: a warm start that picks one uniform distribution for every question teaches
    the two-layer model to ignore the question, and RL never makes it look again (measured:
    held-out reward flat at 0.214 for three seeds, the greedy writer picking one column per
    database). A pretrained model's opinions about unfamiliar words are like these: strong,
    different per word, unrelated to the task.
    """
    rng = random.Random(seed)
    preferences = {}
    for tables in sql.DATABASES.values():
        pairs = [(table.name, column.name) for table in tables for column in table.columns]
        for table in tables:
            for column in table.columns:
                preferences[column.synonym] = {pair: 0.2 + rng.random() for pair in pairs}
    return preferences


def restated(task: sql.Task) -> str:
    """The start of a query that restates the attribute word, before the column is chosen."""
    return f"SELECT /* {sql.asked_attribute(task.question)} */"


@dataclass
class FormatTurns:
    """One draw of every node's turns on training questions, the format the starting policy learns."""

    queries: list[FormatExample]  # writer and rewriter: restate, then a preferred (table, column)
    restatements: list[FormatExample]  # writer and rewriter: the restated word alone, the turn not ended
    verdicts: list[FormatExample]  # checker: yes or no at random


def format_turns(train: list[Task], seed: int, n: int) -> FormatTurns:
    """``n`` training questions' turns: the writer's query, the checker's verdict, the rewriter's query.

    The queries run, so the checker and the rewriter see the results the agent would show them.
    """
    rng = random.Random(seed)
    preferences = column_preferences(seed)
    local = [sql.Task(**t) for t in train if sql.asked_attribute(t["question"]) is not None]
    if not local:
        raise ValueError("the tiny model's warm start needs the local questions; with --data, pass --model (a pretrained model)")

    def query(task: sql.Task) -> str:
        word = sql.asked_attribute(task.question)
        weights = preferences[word]
        table, column = rng.choices(list(weights), weights=list(weights.values()))[0]
        return sql.query_text(table, column, task.where_value, note=word)

    schemas: dict[str, str] = {}
    turns = FormatTurns([], [], [])
    for _ in range(n):
        task = rng.choice(local)
        schema = schemas.setdefault(task.db_path, sql.schema_text(task.db_path))
        first = query(task)
        result = sql.result_text(sql.execute(task.db_path, first))
        writer, rewriter = sql.writer_messages(task.question, schema), sql.rewriter_messages(task.question, schema, first, result)
        turns.queries += [FormatExample(writer, first, agent="writer"), FormatExample(rewriter, query(task), agent="rewriter")]
        turns.restatements += [FormatExample(m, restated(task), ends_turn=False, agent=a) for m, a in ((writer, "writer"), (rewriter, "rewriter"))]
        turns.verdicts.append(FormatExample(sql.checker_messages(task.question, schema, first, result), rng.choice(sql.VERDICTS), agent="checker"))
    return turns


def warm_start(train: list[Task], seed: int, n: int = 1200) -> list[WarmStartStage]:
    """Teach the format, not the task: restate the question's attribute word in a comment, then
    query a (table, column) drawn from that word's arbitrary preference (:func:`column_preferences`),
    keeping the question's value; checker turns answer yes or no at random.

    The comment puts the deciding word at a fixed distance before the column, where a two-layer
    model finds it (as the demo's restated word and calc's word before the number do). Restating
    is a copy, taught alone first until learned, then kept in the mix. The table is the column's
    own: reading the schema is format, which column the question means is the task.
    """
    turns = format_turns(train, seed, n)
    restatements = turns.restatements[: n // 2]
    return [
        WarmStartStage(restatements, max_epochs=20, stop_below_loss=0.01),
        WarmStartStage(turns.queries + restatements, max_epochs=8, stop_below_loss=0.15),
        WarmStartStage(turns.queries + turns.verdicts + restatements, max_epochs=2),
    ]


def kept_format(train: list[Task], seed: int, n: int = 256) -> list[FormatExample]:
    """Turns replayed each round, which reinforcement learning would otherwise wear down.

    - The restated word: identical credit punishes a faithful restatement whenever the column
      after it is wrong. Without this replay, one seed's writer had dropped the word or looped
      on it for 2 of the 14 attribute words by round 16.
    - The checker's random verdicts: the checker runs with the trained weights but is never trained.
    """
    turns = format_turns(train, seed + 1, n)
    return turns.restatements[:n] + turns.verdicts


def tokenizer_corpus() -> tuple[str, ...]:
    """The prompts' and queries' words, so each name, synonym and value is a token or two."""
    train, held_out = sql.all_tasks(0)
    corpus = []
    for task in train + held_out:
        text = sql.schema_text(task.db_path)
        corpus += [sql.WRITER_SYSTEM.format(schema=text), sql.CHECKER_SYSTEM.format(schema=text),
                   sql.REWRITER_SYSTEM.format(schema=text), task.question, task.gold,
                   task.gold.replace("SELECT ", f"SELECT /* {sql.asked_attribute(task.question)} */ ")]
    return tuple(corpus)


def held_out_first_queries(spans: Path) -> list[tuple[str, str, str]]:
    """(task id, schema as the prompt showed it, the writer's first query) of every held-out episode in ``spans``."""
    from tracerl.pipeline.source import raw_spans_of

    with raw_spans_of(spans) as con:
        rows = con.sql("""
            SELECT task_id, arg_min(attributes, start_time_unix_nano) FROM raw_spans
            WHERE split = 'test' AND agent_name = 'writer' AND name LIKE 'chat %' GROUP BY episode_id, task_id ORDER BY task_id
        """).fetchall()
    queries = []
    for task_id, attributes in rows:
        values = json.loads(attributes)
        system = json.loads(values[A.GEN_AI_INPUT_MESSAGES])[0]["parts"][0]["content"]
        answer = json.loads(values.get(A.GEN_AI_OUTPUT_MESSAGES) or "[]")
        query = sql.clean_query(answer[0]["parts"][0].get("content") or "") if answer else ""
        queries.append((task_id, system.partition("Tables: ")[2], query))
    return queries


def held_out_skill(spans: Path) -> SkillCount:
    """Held-out episodes whose writer named a table of the schema and a column of that table (:func:`sql.schema_linked`)."""
    queries = held_out_first_queries(spans)
    shown = sum(sql.schema_linked(query, schema) for _, schema, query in queries)
    return SkillCount("the writer's first query selects a column of the schema from its table", shown, len(queries))


RECIPE = AgentRecipe(
    name="sql",
    title="SQL agent (LangGraph writer/checker/rewriter), tiny model",
    agent_argv=(sys.executable, "-m", "examples.sql.agent"),
    tiny_agent_args=("--examples", "0"),  # the tiny model learns the format from its warm start
    tasks=tasks,
    warm_start=warm_start,
    format_replay=kept_format,
    tokenizer_corpus=tokenizer_corpus(),
    held_out_skill=held_out_skill,
    # the claim rests on execution match, never on the partial credit --partial-credit adds
    held_out_primary=reward_reached("execution_match", "the final query returns the gold's rows"),
    version=3,
    defaults=LocalConfig(
        out=Path("runs/sql"), rounds=16, tasks_per_round=32, group_size=8, eval_tasks=100, agents="writer,rewriter",
        replay_samples=64, tiny_learning_rate=5e-4,
    ),
)
