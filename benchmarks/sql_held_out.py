"""What the SQL writer's held-out queries got, per round of a run: the gold's rows, its table and
column, its table only, or another table. The skill a learning run teaches, in counts.

Reads the spans a run left (``RUN/rounds/NNN/data/spans``); the run's seed (its folder name ends
``-seedN``) gives the held-out questions.

    python benchmarks/sql_held_out.py /tmp/sqlw/rl-seed0 /tmp/sqlw/shuffled-seed0 [--show 5]
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

from loop_runs import REPO  # noqa: F401  (puts the repository root on sys.path, for examples.*)

from examples.sql import task as sql
from examples.sql.recipe import held_out_first_queries

KINDS = ("gold rows", "table and column", "table only", "another table")


def kind(task: sql.Task, query: str) -> str:
    if sql.execution_match(task.db_path, query, task.gold):
        return KINDS[0]
    return {0.5: KINDS[1], 0.25: KINDS[2]}.get(sql.schema_link_credit(task, query), KINDS[3])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path, nargs="+", help="run folders (VARIANT-seedN) of benchmarks/learning.py --out")
    parser.add_argument("--show", type=int, default=0, help="print this many of the last round's queries that missed the gold rows")
    args = parser.parse_args()
    print("| run | round | " + " | ".join(KINDS) + " |\n|---|---|" + "---|" * len(KINDS))
    misses = []
    for run in args.runs:
        held_out = {t.task_id: t for t in sql.all_tasks(int(run.name.rpartition("-seed")[2]))[1]}
        for folder in sorted((run / "rounds").iterdir()):
            got = [(held_out[task_id], query) for task_id, _, query in held_out_first_queries(folder / "data" / "spans")]
            kinds = [kind(task, query) for task, query in got]
            counts = Counter(kinds)
            print(f"| {run.name} | {int(folder.name)} | " + " | ".join(str(counts[k]) for k in KINDS) + " |")
        missed = [(task, query) for (task, query), k in zip(got, kinds) if k != KINDS[0]]  # the last round's
        misses += [f"- {run.name}: {task.question} -> `{query[:100].replace(chr(10), ' ')}`" for task, query in missed[: args.show]]
    if misses:
        print("\nLast round, queries that missed the gold rows:\n\n" + "\n".join(misses))


if __name__ == "__main__":
    main()
