"""The ``rewards`` table: rewards that arrive after the episode (user feedback, tests).

A row is keyed by exactly one of ``episode_id``, ``trace_id``, ``response_id`` or
``rollout_id`` (an agentlightning rollout: each of its attempts, or the one ``attempt_id``
names; agentlightning keeps a reward a rollout returns in its store only).
"""

from __future__ import annotations

import pyarrow as pa

from tracerl.schemas.versioned import versioned_schema

REWARDS_SCHEMA_VERSION = 1

# the columns a row can be keyed by (a rewards file needs at least one)
REWARD_KEYS = ("episode_id", "trace_id", "response_id", "rollout_id")

REWARDS_SCHEMA = versioned_schema(
    "rewards",
    REWARDS_SCHEMA_VERSION,
    [
        pa.field("episode_id", pa.string()),
        pa.field("trace_id", pa.string()),
        pa.field("response_id", pa.string()),
        pa.field("rollout_id", pa.string()),
        pa.field("attempt_id", pa.string()),
        pa.field("name", pa.string()),
        pa.field("value", pa.float64(), nullable=False),
        pa.field("time_unix_nano", pa.int64()),
    ],
)
