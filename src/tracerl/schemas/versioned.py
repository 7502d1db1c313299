"""Every tracerl table's Arrow schema names its table and schema version in its metadata.

pyarrow keeps a schema's metadata in each Parquet file it writes, so a file says which
table and which version of it it holds wherever it is copied, and a reader can refuse a
file of another version by name instead of misreading its columns.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from tracerl.schemas import attributes as A


def versioned_schema(table: str, version: int, fields: Sequence[pa.Field]) -> pa.Schema:
    """The schema of ``table`` at ``version``: ``fields`` plus the two metadata keys."""
    return pa.schema(fields, metadata={A.TABLE_METADATA_KEY: table, A.SCHEMA_VERSION_METADATA_KEY: str(version)})
