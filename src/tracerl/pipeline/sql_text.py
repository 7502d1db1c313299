"""Python values written into DuckDB SQL text (names, paths, rule names, schemas), quoted once, here."""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa

# Arrow type -> DuckDB type, for the types of tracerl's schemas
_DUCKDB_TYPES = {
    "string": "VARCHAR", "int8": "TINYINT", "int32": "INTEGER", "int64": "BIGINT", "float": "FLOAT", "double": "DOUBLE",
    "list<item: int8>": "TINYINT[]", "list<item: int32>": "INTEGER[]", "list<item: float>": "FLOAT[]",
}


def sql_str(text: str) -> str:
    """A SQL string literal of ``text``."""
    return "'" + text.replace("'", "''") + "'"


def sql_list(items: Iterable[str]) -> str:
    """A DuckDB list literal of strings (e.g. the file paths given to ``read_parquet``)."""
    return "[" + ", ".join(sql_str(item) for item in items) + "]"


def empty_select(schema: pa.Schema) -> str:
    """A zero-row SELECT with the columns and types of an Arrow schema (a table's shape when there is no file)."""
    cols = ", ".join(f'NULL::{_DUCKDB_TYPES[str(f.type)]} AS "{f.name}"' for f in schema)
    return f"SELECT {cols} WHERE false"
