"""Arrow schemas of every tracerl table, their versions, and the attribute names."""

from tracerl.schemas.dataset import DATASET_SCHEMA, DATASET_SCHEMA_VERSION
from tracerl.schemas.rewards import REWARDS_SCHEMA, REWARDS_SCHEMA_VERSION
from tracerl.schemas.spans import SPANS_SCHEMA, SPANS_SCHEMA_VERSION, span_row, spans_table

__all__ = [
    "DATASET_SCHEMA",
    "DATASET_SCHEMA_VERSION",
    "REWARDS_SCHEMA",
    "REWARDS_SCHEMA_VERSION",
    "SPANS_SCHEMA",
    "SPANS_SCHEMA_VERSION",
    "span_row",
    "spans_table",
]
