"""The ``rewards`` table: rewards that arrive after the episode (user feedback, tests).

A row is keyed by exactly one of ``episode_id``, ``trace_id`` or ``response_id``.
"""

from __future__ import annotations

import pyarrow as pa

from tracerl.schemas.versioned import versioned_schema

REWARDS_SCHEMA_VERSION = 1

REWARDS_SCHEMA = versioned_schema(
    "rewards",
    REWARDS_SCHEMA_VERSION,
    [
        pa.field("episode_id", pa.string()),
        pa.field("trace_id", pa.string()),
        pa.field("response_id", pa.string()),
        pa.field("name", pa.string()),
        pa.field("value", pa.float64(), nullable=False),
        pa.field("time_unix_nano", pa.int64()),
    ],
)
