"""Reading a vLLM answer cheaply on the agent's thread: the prompt ids are cut out of the
JSON unparsed, and whatever looks unusual falls back to parsing the whole body."""

from __future__ import annotations

import orjson
import pytest

from tracerl.instrumentation import token_capture as tc
from tracerl.schemas import attributes as A
from tracerl.schemas.tokens import decode

PLAN = tc.Plan("chat", ask=True, strip_token_ids=True, strip_logprobs=True, stream=False)


@pytest.mark.parametrize(
    "raw",
    [
        b'{"id":"c1","prompt_token_ids":[5, 6,7],"choices":[]}',
        b'{"prompt_token_ids":[5,6,7] ,"id":"c1","choices":[]}',
        b'{"id":"c1","choices":[],"prompt_token_ids":[5,6,7]}',
        # the member's text inside a string value is escaped, so only the real member is cut
        b'{"id":"c1","choices":[],"note":"\\"prompt_token_ids\\":[1]","prompt_token_ids":[5,6,7]}',
    ],
)
def test_the_prompt_ids_are_cut_out_and_the_rest_is_the_same_json(raw):
    rest, ids = tc.cut_prompt_ids(raw)
    expected = orjson.loads(raw)
    del expected["prompt_token_ids"]
    assert orjson.loads(rest) == expected
    assert ids.array().tolist() == [5, 6, 7]


@pytest.mark.parametrize(
    "raw",
    [
        b'{"prompt_token_ids":[5,6,7]}',  # no comma to take with it
        b'{"prompt_token_ids":[5,6],"x":{"prompt_token_ids":[1]}}',  # twice
        b'{"a":1,"prompt_token_ids":[5,"six"]}',  # not a plain int array
        b'{"a":1,"prompt_token_ids":[5.5]}',
        b'{"a":1}',
        b'{"a":1,"prompt_token_ids": [5]}',  # spaced JSON: not vLLM's, parsed whole
    ],
)
def test_anything_unusual_is_left_to_the_whole_body_parser(raw):
    assert tc.cut_prompt_ids(raw) is None


def test_ids_that_are_not_int32_make_a_call_without_token_ids_never_a_crash():
    stats_before = tc.STATS.missing.copy()
    tokens = tc.Tokens(prompt_ids=tc.IdsText(b"1,--2"), completion_ids=[3])
    attributes = tc.token_attributes(PLAN, tokens, "packed")
    assert A.PROMPT_TOKEN_IDS not in attributes and "no token ids" in attributes[A.TOKEN_IDS_MISSING]
    assert sum(tc.STATS.missing.values()) == sum(stats_before.values()) + 1
    too_big = tc.token_attributes(PLAN, tc.Tokens(prompt_ids=tc.IdsText(b"3000000000"), completion_ids=[3]), "packed")
    assert A.TOKEN_IDS_MISSING in too_big


def test_log_probs_are_converted_off_the_calling_thread_and_bad_ones_are_dropped():
    body = {"choices": [{"index": 0, "token_ids": [3, 4], "message": {"role": "assistant", "content": "hi"},
                         "logprobs": {"content": [{"token": "h", "logprob": -0.5}, {"token": "i", "logprob": -0.25}]}}],
            "prompt_token_ids": [1, 2]}
    tokens = tc.take_tokens(PLAN, body)
    assert isinstance(tokens.logprobs, tc.LogprobsJSON) and body["choices"][0]["logprobs"] is None
    attributes = tc.token_attributes(PLAN, tokens, "packed")
    assert decode(attributes[A.COMPLETION_LOGPROBS]) == [-0.5, -0.25]
    assert decode(attributes[A.PROMPT_TOKEN_IDS]) == [1, 2] and A.TOKEN_IDS_MISSING not in attributes

    broken = tc.Tokens(prompt_ids=[1], completion_ids=[2], logprobs=tc.LogprobsJSON("chat", {"content": [{"token": "x"}]}))
    attributes = tc.token_attributes(PLAN, broken, "packed")
    assert A.COMPLETION_LOGPROBS not in attributes and decode(attributes[A.COMPLETION_TOKEN_IDS]) == [2]
