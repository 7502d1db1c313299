"""Splitting a whole vLLM answer cheaply on the agent's thread: what tracerl asked for
(prompt and completion ids, log-probs) is cut out of the JSON unparsed, and the agent gets
the rest as it came; the tokens are read from the cut members later, off that thread."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracerl.instrumentation.answer_split import split_answer
from tracerl.instrumentation.call_tokens import Tokens
from tracerl.instrumentation.request_plan import Plan
from tracerl.schemas import attributes as A

PLAN = Plan("chat", ask=True, strip_token_ids=True, strip_logprobs=True, stream=False)


def reference_strip(raw: bytes) -> dict:
    """What the agent must get, computed the slow, obvious way: parse all, remove, compare."""
    body = orjson.loads(raw)
    body.pop("prompt_token_ids", None)
    for choice in body["choices"] if isinstance(body.get("choices"), list) else ():
        if isinstance(choice, dict):
            choice.pop("token_ids", None)
            if "logprobs" in choice:
                choice["logprobs"] = None
    return body


def agent_body(plan: Plan, raw: bytes) -> dict:
    body, _ = split_answer(plan, raw)
    return orjson.loads(body)


@pytest.mark.parametrize(
    "raw",
    [
        b'{"id":"c1","prompt_token_ids":[5, 6,7],"choices":[{"index":0,"token_ids":[1],"logprobs":{"content":[]}}]}',
        b'{"prompt_token_ids":[5,6,7] ,"id":"c1","choices":[]}',
        b'{ "id" : "c1", "choices" : [ { "logprobs" : null , "token_ids" : [ 1 ] } ], "prompt_token_ids" : [5] }',
        # the members' names inside string values are not members
        b'{"id":"c1","note":"\\"prompt_token_ids\\":[1]","choices":[{"message":{"content":"\\"logprobs\\": ]}"},'
        b'"logprobs":{"content":[{"token":"]}\\"","logprob":-0.5,"bytes":[93,125,34],"top_logprobs":[]}]},"token_ids":[9]}],'
        b'"prompt_token_ids":[5,6,7]}',
        '{"id":"é","choices":[{"index":0,"message":{"content":"日本 \\u00e9"},"token_ids":[1,2]}]}'.encode(),
        b'{"id":"c1","choices":[{"index":0,"token_ids":[1]},{"index":1,"token_ids":[2],"logprobs":{"content":[]}}]}',
    ],
)
def test_the_added_members_are_cut_out_and_the_rest_is_the_same_json(raw):
    assert agent_body(PLAN, raw) == reference_strip(raw)


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(
    top=st.dictionaries(st.text(max_size=12), _json_values, max_size=5),
    choices=st.lists(st.dictionaries(st.sampled_from(["index", "message", "token_ids", "logprobs", "x"]), _json_values), max_size=3),
    prompt=st.one_of(st.none(), st.lists(st.integers(0, 2**31 - 1), max_size=20)),
)
def test_any_answer_strips_like_the_obvious_parse_and_remove(top, choices, prompt):
    body = {**top, "choices": choices}
    if prompt is not None:
        body["prompt_token_ids"] = prompt
    raw = orjson.dumps(body)
    assert agent_body(PLAN, raw) == reference_strip(raw)


def test_members_the_agent_asked_for_itself_stay():
    raw = b'{"prompt_token_ids":[5],"choices":[{"token_ids":[1],"logprobs":{"content":[]}}]}'
    own = Plan("chat", ask=True, strip_token_ids=False, strip_logprobs=False, stream=False)
    assert agent_body(own, raw) == orjson.loads(raw)


@pytest.mark.parametrize("raw", [b"[1, 2]", b'"text"', b'{"id": "c1",', b"", b"not json", b'{"a":1}{"b":2}'])
def test_what_is_not_a_json_object_is_left_to_the_agent_untouched(raw):
    assert split_answer(PLAN, raw) is None


def test_choices_that_are_not_objects_are_passed_through():
    raw = b'{"prompt_token_ids":[5],"choices":"odd"}'
    assert agent_body(PLAN, raw) == {"choices": "odd"}


def test_the_tokens_of_choice_0_are_read_later_from_the_cut_members():
    raw = orjson.dumps({
        "policy_version": 4,
        "choices": [{"index": 1, "token_ids": [8], "logprobs": {"content": [{"token": "z", "logprob": -9.0}]}},
                    {"index": 0, "token_ids": [3, 4], "message": {"role": "assistant", "content": "hi"},
                     "logprobs": {"content": [{"token": "h", "logprob": -0.5}, {"token": "i", "logprob": -0.25}]}}],
        "prompt_token_ids": [1, 2],
    })
    _, raw_tokens = split_answer(PLAN, raw)
    assert raw_tokens.read() == Tokens(prompt_ids=[1, 2], completion_ids=[3, 4], logprobs=[-0.5, -0.25], policy_version=4)


def test_completion_log_probs_are_read_from_their_own_layout():
    plan = Plan("completions", ask=True, strip_token_ids=True, strip_logprobs=True, stream=False)
    raw = b'{"choices":[{"index":0,"text":"hi","token_ids":[3,4],"logprobs":{"tokens":["h","i"],"token_logprobs":[-0.5,-0.25]}}]}'
    body, raw_tokens = split_answer(plan, raw)
    assert orjson.loads(body) == {"choices": [{"index": 0, "text": "hi", "logprobs": None}]}
    assert raw_tokens.read().logprobs == [-0.5, -0.25]


def test_the_policy_version_header_counts_when_the_body_has_none():
    _, raw_tokens = split_answer(PLAN, b'{"choices":[{"token_ids":[3]}],"prompt_token_ids":[1]}')
    assert raw_tokens.read({A.POLICY_VERSION_HEADER: "12"}).policy_version == 12


def test_malformed_log_probs_make_a_call_without_log_probs_never_an_error():
    raw = b'{"choices":[{"index":0,"token_ids":[2],"logprobs":{"content":[{"token":"x"}]}}],"prompt_token_ids":[1]}'
    _, raw_tokens = split_answer(PLAN, raw)
    tokens = raw_tokens.read()
    assert tokens.logprobs is None and tokens.completion_ids == [2]

