"""The judge's record: an append-only JSON-lines file per reward name, in the data dir's ``judgments/``.

Every line is one outcome, written (and fsynced) before the next group's call, so a
killed judge loses at most the group in flight and a re-run repeats none that was
written. Lines are of two kinds:

- ``episode``: one episode's judgment: ``status`` ``scored`` (with ``score`` and the judge's
  ``explanation``), ``failed`` (the judge's answer did not parse after a retry, or the call
  failed: ``reason``), or ``skipped`` (``reason``, e.g. ``too_long``); with the ``judge_model``
  and ``rubric_sha256`` it was judged under, its ``group``, its ``trajectory_id`` in it and
  the time (``unix``).
- ``group``: the prompt sent for a group and every raw answer, for audit.

The latest line of an episode under one (judge model, rubric) wins. ``scored`` and
``skipped`` are final; a ``failed`` episode is judged again by the next run. A line cut by
a crash (no final newline) is dropped when the file is next opened for writing.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import duckdb

from tracerl.pipeline.counts import grouped, scalar
from tracerl.pipeline.sql_text import sql_list

FINAL_STATUSES = ("scored", "skipped")
COLUMNS = ("episode_id", "task_id", "judge_model", "rubric_sha256", "status", "reason", "score")


class JudgmentLog:
    """Appends lines to one judgments file; reads what it already holds."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._drop_torn_tail()

    def _drop_torn_tail(self) -> None:
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        if data and not data.endswith(b"\n"):
            with self.path.open("r+b") as handle:
                handle.truncate(data.rfind(b"\n") + 1)

    def records(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text(encoding="utf-8").splitlines() if line.strip()]

    def latest(self, judge_model: str, rubric_sha256: str) -> dict[str, dict[str, Any]]:
        """episode_id -> its latest ``episode`` line under this judge and rubric."""
        found: dict[str, dict[str, Any]] = {}
        for record in self.records():  # in file order: a later line is a later judgment
            if record.get("kind") == "episode" and record["judge_model"] == judge_model and record["rubric_sha256"] == rubric_sha256:
                found[record["episode_id"]] = record
        return found

    def append(self, records: list[dict[str, Any]]) -> None:
        """Write ``records`` in one write and make them durable before returning."""
        text = "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records)
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())


def register_judgments(con: duckdb.DuckDBPyConnection, files: list[str]) -> None:
    """Table ``judgments``: the latest ``episode`` line of every episode, judge model and rubric (counted by doctor)."""
    columns = ", ".join(f'"{c}"' for c in COLUMNS)
    if not files:
        con.execute(f"CREATE OR REPLACE TEMP TABLE judgments AS SELECT {', '.join(f'NULL::VARCHAR AS {c}' for c in COLUMNS[:-1])}, "
                    "NULL::DOUBLE AS score WHERE false")
        return
    types = {c: "VARCHAR" for c in COLUMNS} | {"score": "DOUBLE", "kind": "VARCHAR", "unix": "DOUBLE"}
    struct = "{" + ", ".join(f"'{c}': '{t}'" for c, t in types.items()) + "}"
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE judgments AS
        SELECT {columns}
        FROM read_json({sql_list(files)}, format = 'newline_delimited', columns = {struct}, ignore_errors = true)
        WHERE kind = 'episode'
        QUALIFY row_number() OVER (PARTITION BY episode_id, judge_model, rubric_sha256 ORDER BY unix DESC) = 1
        """
    )


def counts(con: duckdb.DuckDBPyConnection, files: list[str]) -> dict[str, Any]:
    """`pipeline judge`'s outcomes (judgments/): each episode's latest under each judge model and rubric."""
    return {"judgments": {
        "files": len(files),
        "by_status": grouped(con, "SELECT status, count(*) FROM judgments GROUP BY 1 ORDER BY 1"),
        "skipped": grouped(con, "SELECT reason, count(*) FROM judgments WHERE status = 'skipped' GROUP BY 1 ORDER BY 1"),
        "failed_reasons": grouped(
            con, "SELECT left(reason, 120), count(*) FROM judgments WHERE status = 'failed' GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 3"
        ),
    }}
