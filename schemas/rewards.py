"""The ``rewards`` table: rewards that arrive after the episode (user feedback, tests).

A row is keyed by exactly one of ``episode_id``, ``trace_id`` or ``response_id``.
"""

from __future__ import annotations

import pyarrow as pa

REWARDS_SCHEMA_VERSION = 1

REWARDS_SCHEMA = pa.schema(
    [
        pa.field("episode_id", pa.string()),
        pa.field("trace_id", pa.string()),
        pa.field("response_id", pa.string()),
        pa.field("name", pa.string()),
        pa.field("value", pa.float64(), nullable=False),
        pa.field("time_unix_nano", pa.int64()),
    ],
    metadata={"tracerl.table": "rewards", "tracerl.schema_version": str(REWARDS_SCHEMA_VERSION)},
)
