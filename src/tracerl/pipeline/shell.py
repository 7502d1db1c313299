"""The `tracerl sql` shell: read statements ending in ';', run them in DuckDB, print the result.

The DuckDB Python package ships no shell of its own; this one is deliberately small:
statements, ``.tables``, ``.examples``, ``.quit``.
"""

from __future__ import annotations

import json
import sys

import duckdb
import pyarrow.csv as pacsv

from tracerl.pipeline.sql import EXAMPLES, VIEWS


def print_result(con: duckdb.DuckDBPyConnection, query: str, output: str = "table") -> None:
    """Run ``query`` and print its rows as a table, CSV or JSON lines."""
    relation = con.sql(query)
    if relation is None:  # a statement without rows
        return
    if output == "table":
        relation.show(max_rows=200, max_width=200)
    elif output == "csv":
        sys.stdout.flush()
        pacsv.write_csv(relation.to_arrow_table(), sys.stdout.buffer)
        sys.stdout.buffer.flush()
    elif output == "json":
        for row in relation.to_arrow_table().to_pylist():
            print(json.dumps(row, default=str, ensure_ascii=False))
    else:
        raise ValueError(f"unknown format {output!r}: use table, csv or json")


def repl(con: duckdb.DuckDBPyConnection) -> None:
    print(f"views: {', '.join(VIEWS)}; end statements with ';'; .examples, .tables, .quit")
    buffer: list[str] = []
    while True:
        try:
            line = input("tracerl> " if not buffer else "    ...> ")
        except EOFError:
            print()
            return
        stripped = line.strip()
        if not buffer and stripped in (".quit", ".exit"):
            return
        if not buffer and stripped == ".tables":
            print(", ".join(VIEWS))
            continue
        if not buffer and stripped == ".examples":
            for title, query in EXAMPLES:
                print(f"-- {title}\n{query};\n")
            continue
        buffer.append(line)
        if stripped.endswith(";"):
            try:
                print_result(con, "\n".join(buffer))
            except duckdb.Error as exc:
                print(f"error: {exc}")
            buffer = []
