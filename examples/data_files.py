"""Reading the paper's public data files, with errors that say which file, which line and what to fix."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path


class DataFormatError(ValueError):
    """A data file that cannot be read; the message names the file, the line and what is wrong."""


def json_objects(path: Path, data_set: str, fields: str) -> Iterator[tuple[str, dict]]:
    """Each object of a JSON-lines file with where it is (``FILE, line N``); blank lines are skipped.

    ``data_set`` and ``fields`` name the format in the messages (``"MuSiQue"``, ``"id, question, answer"``).
    """
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            where = f"{path}, line {number}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataFormatError(
                    f"{where}: not JSON ({exc.msg} at column {exc.colno}); {data_set} files hold one JSON object per line"
                ) from None
            if not isinstance(record, dict):
                raise DataFormatError(f"{where}: a {type(record).__name__}, expected a JSON object with {fields}")
            yield where, record
