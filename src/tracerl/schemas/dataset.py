"""The ``dataset`` table: one row per MDP transition (one LLM call of the policy)."""

from __future__ import annotations

import pyarrow as pa

from tracerl.schemas.versioned import versioned_schema

DATASET_SCHEMA_VERSION = 3  # 2: policy_name; 3: token_source

DATASET_SCHEMA = versioned_schema(
    "dataset",
    DATASET_SCHEMA_VERSION,
    [
        pa.field("episode_id", pa.string(), nullable=False),
        pa.field("task_id", pa.string()),
        pa.field("split", pa.string()),
        pa.field("agent_name", pa.string()),
        pa.field("step", pa.int32(), nullable=False),  # 0-based order of the call in its episode
        pa.field("prompt_token_ids", pa.list_(pa.int32()), nullable=False),
        pa.field("response_token_ids", pa.list_(pa.int32()), nullable=False),
        pa.field("response_logprobs", pa.list_(pa.float32())),
        pa.field("response_mask", pa.list_(pa.int8())),  # 1 where a token is the policy's action
        # where the token ids come from: "served" (what the server sampled, captured on the span) or
        # "retokenized" (rebuilt from the messages with the policy's tokenizer: `build-dataset --retokenize`)
        pa.field("token_source", pa.string(), nullable=False),
        pa.field("reward", pa.float64(), nullable=False),  # immediate reward of this call
        pa.field("return", pa.float64(), nullable=False),  # credit-assigned return
        pa.field("advantage", pa.float64(), nullable=False),
        pa.field("policy_version", pa.int64()),
        # the policy that sampled the call: the model name the server answered as (a LoRA adapter's name
        # when one vLLM serves several policies), else the name the agent asked for
        pa.field("policy_name", pa.string()),
        pa.field("trace_id", pa.string(), nullable=False),
        pa.field("span_id", pa.string(), nullable=False),
        pa.field("response_id", pa.string()),
        pa.field("input_messages", pa.string()),  # JSON
        pa.field("output_messages", pa.string()),  # JSON
    ],
)
