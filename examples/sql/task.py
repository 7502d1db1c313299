"""The SQL agent's task: questions about small SQLite databases, scored by executing the query.

It is the paper's Spider experiment shrunk to what a tiny model learns on two CPU cores.
A few databases of two or three tables each are made locally (stdlib ``sqlite3``, one
file per ``db_id`` in Spider's layout). Each question asks for one attribute of one
named entity, in words that are not the schema's names: *"What is the pay of the tutor
named Ann?"* needs ``SELECT salary FROM teacher WHERE name = 'Ann'``. Which table and
which column are right depends on the question (``tutor`` -> ``teacher``, ``pay`` ->
``salary``): the skill reinforcement learning must teach, written nowhere in the prompt.

The reward is Spider's execution match: 1 when the final query returns the same rows as
the gold query (as a multiset; in order when the gold query has ORDER BY), else 0.

:func:`load_spider` reads Spider itself (``dev.json`` / ``train_spider.json`` beside
``database/<db_id>/<db_id>.sqlite``) for runs with a real model.
"""

from __future__ import annotations

import json
import os
import random
import re
import sqlite3
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from tracerl.instrumentation.agent_env import cache_dir

# ---- the local databases ------------------------------------------------------------------


@dataclass(frozen=True)
class Column:
    name: str
    synonym: str  # the word questions use for it
    values: tuple  # one per row, cycled: distinct ranges per column, so a wrong column gives a wrong result


@dataclass(frozen=True)
class Table:
    name: str
    synonym: str
    columns: tuple[Column, ...]  # besides `name`, the column every question filters on


def _ints(start: int, step: int, n: int = 12) -> tuple[int, ...]:
    return tuple(start + step * i for i in range(n))


DATABASES: dict[str, tuple[Table, ...]] = {
    "school": (
        Table("student", "pupil", (Column("age", "years", _ints(10, 1)), Column("grade", "mark", _ints(40, 5)))),
        Table("teacher", "tutor", (
            Column("subject", "topic", ("math", "art", "music", "history", "biology", "french")),
            Column("salary", "pay", _ints(3000, 150)),
        )),
    ),
    "shop": (
        Table("product", "item", (Column("price", "cost", _ints(21, 3)), Column("stock", "supply", _ints(200, 25)))),
        Table("customer", "client", (
            Column("city", "town", ("Paris", "Rome", "Oslo", "Lima", "Cairo", "Delhi", "Tokyo")),
            Column("points", "credit", _ints(500, 40)),
        )),
        Table("supplier", "vendor", (
            Column("country", "nation", ("France", "Italy", "Norway", "Peru", "Egypt")),
            Column("rating", "score", _ints(1, 1, 5)),
        )),
    ),
    "clinic": (
        Table("doctor", "medic", (
            Column("ward", "unit", ("north", "south", "east", "west")),
            Column("shift", "hours", ("day", "night", "evening")),
        )),
        Table("patient", "case", (Column("weight", "kilos", _ints(55, 2)), Column("room", "bed", _ints(101, 7)))),
    ),
}
NAMES = ("Ann", "Bob", "Cora", "Dan", "Eve", "Finn", "Gus", "Hana", "Ivo", "Jill", "Kim", "Leo", "Mia", "Ned", "Ola", "Pia")
ROWS_PER_TABLE = 10
WHERE_COLUMN = "name"
DATABASES_VERSION = 1  # bump when DATABASES changes: the files are rebuilt under a new folder


def table_rows(db_id: str, table: Table) -> list[tuple]:
    """The rows of ``table``: a fixed draw of distinct names, each column's values cycled."""
    names = random.Random(f"{db_id}/{table.name}").sample(NAMES, ROWS_PER_TABLE)
    return [(name, *(col.values[i % len(col.values)] for col in table.columns)) for i, name in enumerate(names)]


def local_database_root() -> Path:
    """Where the local databases live, in Spider's layout (``database/<db_id>/<db_id>.sqlite``)."""
    return cache_dir() / "examples" / f"sql-databases-v{DATABASES_VERSION}"


def database_path(root: Path, db_id: str) -> Path:
    """Spider's layout: ``ROOT/database/<db_id>/<db_id>.sqlite``."""
    return root / "database" / db_id / f"{db_id}.sqlite"


def make_local_databases(root: Path | None = None) -> Path:
    """Write every database of :data:`DATABASES` under ``root`` (once; concurrent callers are safe)."""
    root = root or local_database_root()
    for db_id, tables in DATABASES.items():
        path = database_path(root, db_id)
        if path.exists():
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
        tmp.unlink(missing_ok=True)
        with sqlite3.connect(tmp) as db:
            for table in tables:
                db.execute(f"CREATE TABLE {table.name} ({WHERE_COLUMN} TEXT, {', '.join(c.name for c in table.columns)})")
                marks = ", ".join("?" * (len(table.columns) + 1))
                db.executemany(f"INSERT INTO {table.name} VALUES ({marks})", table_rows(db_id, table))
        db.close()
        os.replace(tmp, path)
    return root


# ---- tasks --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Task:
    task_id: str
    db_id: str
    db_path: str
    question: str
    gold: str  # the gold query
    split: str = "train"
    where_value: str | None = None  # the value the question names (local tasks); warm start copies it

    def to_json(self) -> dict:
        return asdict(self)


def question_text(table: Table, column: Column, name: str) -> str:
    return f"What is the {column.synonym} of the {table.synonym} named {name}?"


def query_text(table: str, column: str, where_value: str | None, note: str | None = None) -> str:
    """The one query shape the local tasks need; the warm start writes ``note`` (the question's
    word for the attribute) as a comment just before the column: ``SELECT /* pay */ salary ...``."""
    where = f" WHERE {WHERE_COLUMN} = '{where_value}'" if where_value is not None else ""
    comment = f"/* {note} */ " if note is not None else ""
    return f"SELECT {comment}{column} FROM {table}{where}"


QUESTION_PATTERN = re.compile(r"What is the (\w+) of the (\w+) named (\w+)\?")


def asked_attribute(question: str) -> str | None:
    """The word a local question uses for the attribute it asks (``pay``); None for other questions."""
    match = QUESTION_PATTERN.fullmatch(question)
    return match.group(1) if match else None


def all_tasks(seed: int = 0, eval_fraction: float = 0.2) -> tuple[list[Task], list[Task]]:
    """Every (database, table, column, row) question, split into train and held-out tasks at random."""
    root = make_local_databases()
    tasks = []
    for db_id, tables in DATABASES.items():
        path = str(database_path(root, db_id))
        for table in tables:
            for row in table_rows(db_id, table):
                name = row[0]
                for column in table.columns:
                    tasks.append(Task(
                        f"{db_id}-{table.name}-{column.name}-{name}", db_id, path, question_text(table, column, name),
                        query_text(table.name, column.name, name), where_value=name,
                    ))
    # every (table, column) is asked about in both splits, with different names
    return split_tasks(tasks, seed, eval_fraction, stratum=lambda t: t.gold.split(" WHERE ")[0])


def split_tasks(
    tasks: list[Task], seed: int, eval_fraction: float, stratum: Callable[[Task], str] = lambda t: ""
) -> tuple[list[Task], list[Task]]:
    """Shuffle with ``seed`` and hold out ``eval_fraction`` of each stratum (split ``test``); the rest train."""
    rng = random.Random(seed)
    strata: dict[str, list[Task]] = {}
    for t in tasks:
        strata.setdefault(stratum(t), []).append(t)
    train, held_out = [], []
    for key in sorted(strata):
        group = strata[key]
        rng.shuffle(group)
        n_eval = int(len(group) * eval_fraction)
        held_out += [replace(t, split="test") for t in group[:n_eval]]
        train += [replace(t, split="train") for t in group[n_eval:]]
    rng.shuffle(train)
    rng.shuffle(held_out)
    return train, held_out


# ---- Spider's format ----------------------------------------------------------------------


class SpiderFormatError(ValueError):
    """A Spider file that cannot be read; the message names the file, the line and what to fix."""


SPIDER_KEYS = ("db_id", "question", "query")


def load_spider(path: Path, seed: int = 0, eval_fraction: float = 0.2) -> tuple[list[Task], list[Task]]:
    """Tasks from a Spider file (``dev.json``, ``train_spider.json``: a JSON array of entries with
    ``db_id``, ``question``, ``query``), split at random like the local tasks. Databases are
    read from ``database/<db_id>/<db_id>.sqlite`` beside the file, as Spider ships them."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    tasks = []
    for index, (line, entry) in enumerate(_array_entries(path, text)):
        where = f"{path}:{line} (entry {index})"
        if not isinstance(entry, dict):
            raise SpiderFormatError(f"{where}: an entry must be an object with {', '.join(SPIDER_KEYS)}, got {type(entry).__name__}")
        missing = [key for key in SPIDER_KEYS if not isinstance(entry.get(key), str) or not entry[key].strip()]
        if missing:
            raise SpiderFormatError(f"{where}: missing or empty {', '.join(missing)}; Spider entries carry {', '.join(SPIDER_KEYS)}")
        db_path = database_path(path.parent, entry["db_id"])
        if not db_path.is_file():
            raise SpiderFormatError(
                f"{where}: database {entry['db_id']!r} not found at {db_path}; put Spider's database/ folder beside {path.name}"
            )
        tasks.append(Task(f"spider-{index}", entry["db_id"], str(db_path), entry["question"], entry["query"]))
    if not tasks:
        raise SpiderFormatError(f"{path}: no entries; a Spider file is a JSON array of {{{', '.join(SPIDER_KEYS)}}} objects")
    return split_tasks(tasks, seed, eval_fraction)


def _array_entries(path: Path, text: str):
    """Yield (line number, value) for each element of the JSON array in ``text``."""
    decoder = json.JSONDecoder()
    ws = re.compile(r"\s*")
    pos = ws.match(text, 0).end()
    if not text.startswith("[", pos):
        raise SpiderFormatError(f"{path}:{text.count(chr(10), 0, pos) + 1}: a Spider file is a JSON array ('[' ... ']')")
    pos = ws.match(text, pos + 1).end()
    if text.startswith("]", pos):
        return
    while True:
        line = text.count("\n", 0, pos) + 1
        try:
            value, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            raise SpiderFormatError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg}, column {exc.colno})") from None
        yield line, value
        pos = ws.match(text, pos).end()
        if text.startswith(",", pos):
            pos = ws.match(text, pos + 1).end()
        elif text.startswith("]", pos):
            return
        else:
            raise SpiderFormatError(f"{path}:{text.count(chr(10), 0, pos) + 1}: expected ',' or ']' after an entry")


# ---- the database side: schema, execution, reward ------------------------------------------


def connect(db_path: str) -> sqlite3.Connection:
    """A read-only connection: the agent's queries cannot change the database."""
    return sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, check_same_thread=False)


def read_schema(db_path: str) -> dict[str, list[str]]:
    """Table -> column names, in the database's order."""
    with connect(db_path) as db:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY rowid")]
        return {t: [r[1] for r in db.execute(f'PRAGMA table_info("{t}")')] for t in tables}


def schema_text(db_path: str) -> str:
    """The schema as prompts show it: ``student(name, age, grade); teacher(...)``."""
    return "; ".join(f"{table}({', '.join(columns)})" for table, columns in read_schema(db_path).items())


def execute(db_path: str, query: str) -> list[tuple]:
    """The rows ``query`` returns; sqlite3.Error when it cannot run."""
    with connect(db_path) as db:
        return db.execute(query).fetchall()


def result_text(rows: list[tuple], limit: int = 5) -> str:
    """Rows as prompts show them: ``12`` for one value, ``a, b; c, d`` for more, ``(no rows)``."""
    if not rows:
        return "(no rows)"
    text = "; ".join(", ".join(str(v) for v in row) for row in rows[:limit])
    return text + (f"; ... ({len(rows)} rows)" if len(rows) > limit else "")


def execution_match(db_path: str, query: str, gold: str) -> bool:
    """Spider's execution match: the same rows as the gold query (in order only when it orders them)."""
    try:
        got = execute(db_path, query)
    except sqlite3.Error:
        return False
    want = execute(db_path, gold)
    if re.search(r"\border\s+by\b", gold, re.IGNORECASE):
        return got == want
    return Counter(map(repr, got)) == Counter(map(repr, want))


def reward(task: Task, final_query: str) -> float:
    return 1.0 if execution_match(task.db_path, final_query, task.gold) else 0.0


GOLD_FORM = re.compile(r"\s*SELECT\s+(\w+)\s+FROM\s+(\w+)\b", re.IGNORECASE)


def schema_link_credit(task: Task, query: str) -> float:
    """Partial credit for a query that misses the gold rows: 0.25 for selecting from the gold's table, 0.25 more
    for the gold's column of it (0 for golds not of the form ``SELECT col FROM table ...``, Spider's many).

    What a user gives a small model whose queries almost never match (examples/sql/README.md): credit
    for the part of the skill it can reach, the question's words mapped to the schema's names
    (Spider's component match scores tables and columns the same way).
    """
    gold, got = GOLD_FORM.match(task.gold), GOLD_FORM.match(query)
    if not (gold and got) or got.group(2).lower() != gold.group(2).lower():
        return 0.0
    return 0.5 if got.group(1).lower() == gold.group(1).lower() else 0.25


# ---- prompts: the same functions build the agent's messages and the warm start's ------------

WRITER_SYSTEM = "Write one SQLite query that answers the question. Tables: {schema}"
CHECKER_SYSTEM = "Check a SQLite query. Tables: {schema}"
REWRITER_SYSTEM = "The query was judged wrong. Write a better SQLite query. Tables: {schema}"
VERDICTS = ("yes", "no")  # the checker's answer to "is it right?"; "no" sends the query to the rewriter


EXAMPLE_NAMES = ("Alex", "Sam", "Tess", "Uma")  # in no database: an example's query is shown, never run
MAX_EXAMPLES = len(EXAMPLE_NAMES)


def worked_examples(schema: str, n: int) -> list[tuple[str, str]]:
    """``n`` (question, query) pairs on the task's own tables, asked with the schema's own words.

    What a user of a small model puts before the question: queries of the form the task wants,
    on their schema. The tasks' questions use other words (*pay* for ``salary``, *tutor* for
    ``teacher``): which column and table a word means is left for RL to teach.
    """
    tables = [(name, [c for c in columns if c != "name"]) for name, columns in tables_of(schema).items()]
    pairs = []
    for i in range(n):
        table, columns = tables[i % len(tables)]
        column = columns[(i // len(tables)) % len(columns)]
        name = EXAMPLE_NAMES[i]
        pairs.append((f"What is the {column} of the {table} named {name}?", f"SELECT {column} FROM {table} WHERE name = '{name}'"))
    return pairs


def tables_of(schema: str) -> dict[str, list[str]]:
    """The tables and columns of a schema as prompts show it (:func:`schema_text`)."""
    return {name: [c.strip() for c in columns.split(",")] for name, columns in re.findall(r"(\w+)\(([^)]*)\)", schema)}


def schema_linked(query: str, schema: str) -> bool:
    """Does ``SELECT col FROM table ...`` name a table of the schema and a column of that table?

    The skill the tasks teach, apart from the rest of the query: the question's words mapped to
    the schema's names (*pay of the tutor* -> ``salary``, ``teacher``)."""
    match = GOLD_FORM.match(query)
    tables = {name.lower(): [c.lower() for c in columns] for name, columns in tables_of(schema).items()}
    return bool(match) and match.group(1).lower() in tables.get(match.group(2).lower(), [])


def writer_messages(question: str, schema: str, examples: int = 0) -> list[dict]:
    """The writer's messages; with ``examples``, that many :func:`worked_examples` as earlier turns."""
    messages = [{"role": "system", "content": WRITER_SYSTEM.format(schema=schema)}]
    for asked, query in worked_examples(schema, examples):
        messages += [{"role": "user", "content": asked}, {"role": "assistant", "content": query}]
    return messages + [{"role": "user", "content": question}]


def checker_messages(question: str, schema: str, query: str, result: str) -> list[dict]:
    content = f"Question: {question}\nQuery: {query}\nResult: {result}\nIs the query right? yes or no"
    return [{"role": "system", "content": CHECKER_SYSTEM.format(schema=schema)}, {"role": "user", "content": content}]


def rewriter_messages(question: str, schema: str, query: str, result: str) -> list[dict]:
    return [
        {"role": "system", "content": REWRITER_SYSTEM.format(schema=schema)},
        {"role": "user", "content": question},
        {"role": "assistant", "content": query},
        {"role": "user", "content": f"Result: {result}\nWrong. Write a better query."},
    ]


def clean_query(text: str) -> str:
    """The query in a model's answer: code fences and a trailing semicolon dropped."""
    text = text.strip()
    fenced = re.search(r"```(?:sql)?\s*(.*?)```", text, re.DOTALL | re.IGNORECASE)
    if fenced:
        text = fenced.group(1).strip()
    return text.rstrip(";").strip()
