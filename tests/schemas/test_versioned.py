"""Every table's Parquet files say which table and schema version they hold."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from tracerl.schemas import attributes as A
from tracerl.schemas.dataset import DATASET_SCHEMA, DATASET_SCHEMA_VERSION
from tracerl.schemas.logs import LOGS_SCHEMA, LOGS_SCHEMA_VERSION
from tracerl.schemas.rewards import REWARDS_SCHEMA, REWARDS_SCHEMA_VERSION
from tracerl.schemas.spans import SPANS_SCHEMA, SPANS_SCHEMA_VERSION
from tracerl.core.storage import write_parquet_atomic


@pytest.mark.parametrize(
    ("schema", "table", "version"),
    [
        (SPANS_SCHEMA, "spans", SPANS_SCHEMA_VERSION),
        (LOGS_SCHEMA, "logs", LOGS_SCHEMA_VERSION),
        (REWARDS_SCHEMA, "rewards", REWARDS_SCHEMA_VERSION),
        (DATASET_SCHEMA, "dataset", DATASET_SCHEMA_VERSION),
    ],
)
def test_a_written_file_names_its_table_and_schema_version(tmp_path, schema, table, version):
    path = write_parquet_atomic(schema.empty_table(), tmp_path, prefix=table)
    metadata = pq.read_schema(path).metadata
    assert metadata[A.TABLE_METADATA_KEY.encode()] == table.encode()
    assert metadata[A.SCHEMA_VERSION_METADATA_KEY.encode()] == str(version).encode()
