"""The judge's record and cache: an append-only JSON-lines file per reward name, in the data dir's ``judgments/``.

Every line is one outcome, written (and fsynced) by the worker that got it before that worker
sends its next group, so a killed judge loses at most the groups in flight (one per
``--concurrency`` worker) and a re-run repeats none that was written. Lines are of two kinds:

- ``episode``: one episode's outcome under one judge (its :class:`CacheKey`: ``judge_model``,
  ``rubric_sha256``, ``judge_url``) for one content of the episode (``content_sha256``, a hash
  of what the judge is shown): ``status`` ``scored`` (with ``score`` and the judge's
  ``explanation``), ``failed`` (the answer did not parse after a retry, the call failed, or
  ``--max-calls`` left no call for the retry: ``reason``), or ``skipped`` (``reason``
  ``too_long``, with the ``max_prompt_chars`` it was measured against, or ``max_calls``: the
  budget was spent before its group was sent); its ``group``, its ``trajectory_id`` in it and
  the time (``unix``).
- ``group``: the prompt sent for a group and every raw answer, for audit.

The latest line of an episode under one key is its outcome; whether a run judges the episode
again is :func:`still_stands`'s rule: only a line whose reason cannot have changed stands.
Lines written before the key held ``judge_url`` and ``content_sha256`` match no key: their
episodes are judged once more (the judge says so). What a crash left unfinished is dropped
when the file is next opened for writing: a line cut short (no final newline), and a group
whose line is there with fewer episode lines than it lists (a kill can cut a write longer
than a page between lines), so its episodes are judged again together.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import duckdb

from tracerl.pipeline.counts import grouped
from tracerl.pipeline.sql_text import sql_list

COLUMNS = ("episode_id", "task_id", "judge_model", "rubric_sha256", "status", "reason", "score")


def endpoint(url: str) -> str:
    """The judge's URL as the cache (and the log) holds it: without a user part, query or fragment, where
    credentials can be, and without a trailing slash, so one server is one key however it is written."""
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit((parts.scheme, host, parts.path.rstrip("/"), "", ""))


@dataclass(frozen=True)
class CacheKey:
    """What, besides the episode's content, changes a judgment: another model, rubric or server judges anew."""

    judge_model: str
    rubric_sha256: str
    judge_url: str

    def matches(self, record: dict[str, Any]) -> bool:
        return all(record.get(name) == value for name, value in asdict(self).items())

    def fields(self) -> dict[str, str]:
        return asdict(self)


def still_stands(latest: dict[str, Any] | None, content_sha256: str, max_prompt_chars: int) -> bool:
    """Whether an episode's latest line under a key is its judgment for this run, so it is not judged again.

    A score stands while the episode's content is the one scored. A ``too_long`` skip stands
    while the limit is no higher than the one it was measured against (the same prompt fails a
    lower or equal limit again; a higher one may let it in). Everything else is retried: a
    failure (the server or the answer may be better next time) and a ``max_calls`` skip (the
    budget was spent, not the episode's fault).
    """
    if latest is None or latest.get("content_sha256") != content_sha256:
        return False
    if latest["status"] == "scored":
        return True
    if latest["status"] == "skipped" and latest.get("reason") == "too_long":
        return max_prompt_chars <= latest.get("max_prompt_chars", -1)
    return False


def _unfinished_group(lines: list[bytes]) -> int:
    """How many of the last ``lines`` are a group cut short: its ``group`` line and fewer episode lines than it lists
    (0 when the last group is whole). A group's lines are written together, its ``group`` line first; a ``skipped``
    line (no group) stands alone."""
    for back, line in enumerate(reversed(lines), 1):
        if not line.strip():
            continue
        record = json.loads(line)
        if record.get("kind") == "group":
            return back if back - 1 < len(record.get("episodes", ())) else 0
        if record.get("group") is None:
            return 0
    return 0


class JudgmentLog:
    """Appends lines to one judgments file (from any thread); reads what it already holds."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._drop_unfinished_tail()

    def _drop_unfinished_tail(self) -> None:
        """Cut the file back to its last whole line and, if the last group's lines are not all there, to before that group."""
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        end = data.rfind(b"\n") + 1
        lines = data[:end].splitlines(keepends=True)
        end -= sum(len(line) for line in lines[len(lines) - _unfinished_group(lines):])
        if end < len(data):
            with self.path.open("r+b") as handle:
                handle.truncate(end)

    def records(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        # split at "\n" only: str.splitlines() also breaks at U+2028, NEL and others, which ensure_ascii=False leaves raw
        return [json.loads(line) for line in self.path.read_text(encoding="utf-8").split("\n") if line.strip()]

    def latest(self, key: CacheKey) -> dict[str, dict[str, Any]]:
        """episode_id -> its latest ``episode`` line under ``key``."""
        found: dict[str, dict[str, Any]] = {}
        for record in self.records():  # in file order: a later line is a later judgment
            if record.get("kind") == "episode" and key.matches(record):
                found[record["episode_id"]] = record
        return found

    def unkeyed(self, key: CacheKey) -> set[str]:
        """Episodes with a line of this model and rubric written before the key held the URL and the content."""
        return {r["episode_id"] for r in self.records() if r.get("kind") == "episode" and "content_sha256" not in r
                and r.get("judge_model") == key.judge_model and r.get("rubric_sha256") == key.rubric_sha256}

    def append(self, records: list[dict[str, Any]]) -> None:
        """Write ``records`` in one write and make them durable before returning."""
        text = "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records)
        with self._lock, self.path.open("a", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())


def register_judgments(con: duckdb.DuckDBPyConnection, files: list[str], keep: str = "true") -> None:
    """Table ``judgments``: the latest ``episode`` line of every episode, judge model and rubric (counted by doctor).

    Not by judge URL: a judge moved to another port is the same judge to whoever reads the counts,
    and the latest run's outcome is the one its rewards hold. ``keep``: a condition on a judgment
    (a bucket keeps those of its own episodes)."""
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
        WHERE kind = 'episode' AND {keep}
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
