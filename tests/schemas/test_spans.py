"""A span row promotes the contract's attributes and keeps everything else as JSON."""

import json

from tracerl.schemas import SPANS_SCHEMA, span_row, spans_table
from tracerl.schemas import attributes as A
from tracerl.schemas.tokens import pack_ids


def _row(**attrs):
    return span_row(
        trace_id="a" * 32, span_id="b" * 16, parent_span_id=None, name="chat m", kind="CLIENT",
        start_time_unix_nano=1, end_time_unix_nano=2, status_code="OK", status_message=None,
        attributes=attrs, resource={"service.name": "agent"},
    )


def test_promotes_contract_attributes_and_keeps_the_rest():
    row = _row(**{
        A.EPISODE_ID: "ep1", A.TASK_ID: "t1", A.GEN_AI_AGENT_NAME: "writer", A.AGENT_NAME: "rewriter",
        A.PROMPT_TOKEN_IDS: (1, 2, 3), A.COMPLETION_TOKEN_IDS: pack_ids([4, 5]),
        A.COMPLETION_LOGPROBS: (-0.5, -1.0), A.POLICY_VERSION: 3, "custom": [1, 2],
    })
    assert row["episode_id"] == "ep1" and row["task_id"] == "t1"
    assert row["agent_name"] == "rewriter"  # the tracerl override wins
    assert row["prompt_token_ids"] == [1, 2, 3] and row["completion_token_ids"] == [4, 5]
    assert row["policy_version"] == 3 and row["service_name"] == "agent"
    kept = json.loads(row["attributes"])
    assert kept["custom"] == [1, 2] and A.PROMPT_TOKEN_IDS not in kept
    table = spans_table([row])
    assert table.schema.equals(SPANS_SCHEMA, check_metadata=True)
