"""A span row promotes the contract's attributes and keeps everything else as JSON."""

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from tracerl.schemas import SPANS_SCHEMA, span_row, spans_table
from tracerl.schemas import attributes as A
from tracerl.schemas.spans import _jsonable, to_json
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


# --- to_json: the fast encoder writes exactly the text of the stdlib encoder ------------------

_STDLIB = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=True)
_scalar = st.one_of(st.text(), st.integers(-(2**63), 2**63 - 1), st.booleans(), st.none())
_value = st.recursive(
    st.one_of(_scalar, st.floats(), st.integers(), st.binary(max_size=8)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=3)),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.dictionaries(st.text(), st.one_of(_scalar, _value), max_size=6))
def test_to_json_is_the_stdlib_text_for_every_attribute_value(attributes):
    assert to_json(attributes) == (_STDLIB.encode(_jsonable(attributes)) if attributes else None)


def test_to_json_falls_back_for_what_orjson_writes_differently():
    for attributes in ({"big": 2**70}, {1: "int key"}, {"f": 1e16}, {"f": 1e-5}, {"nan": float("nan")},
                       {"floats": (1e-5, 2.0)}, {"b": b"\x00"}):
        assert to_json(attributes) == json.dumps(
            attributes if "b" not in attributes else {"b": {"bytes_b64": "AA=="}}, separators=(",", ":"),
            ensure_ascii=False)
