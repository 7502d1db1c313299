"""A call's tokens on its span: packed or as int arrays, and a call without them marked
with the reason and counted, never dropped in silence and never an error."""

from __future__ import annotations

import pytest

from tracerl.instrumentation import capture_stats
from tracerl.instrumentation.answer_split import split_answer
from tracerl.instrumentation.call_tokens import Tokens
from tracerl.instrumentation.capture_stats import CaptureStats
from tracerl.instrumentation.request_plan import Plan
from tracerl.instrumentation.token_attributes import token_attributes
from tracerl.schemas import attributes as A
from tracerl.schemas.tokens import decode

PLAN = Plan("chat", ask=True, strip_token_ids=True, strip_logprobs=True, stream=False)
TOKENS = dict(prompt_ids=[1, 2], completion_ids=[3, 4], logprobs=[-0.5, -0.25], policy_version=4)


@pytest.fixture()
def stats(monkeypatch) -> CaptureStats:
    """A fresh call counter for this test (the process-wide one is left as it was)."""
    fresh = CaptureStats()
    monkeypatch.setattr(capture_stats, "STATS", fresh)
    return fresh


def test_tokens_are_packed_by_default_and_counted(stats):
    attributes = token_attributes(PLAN, Tokens(**TOKENS), "packed")
    assert decode(attributes[A.PROMPT_TOKEN_IDS]) == [1, 2] and decode(attributes[A.COMPLETION_TOKEN_IDS]) == [3, 4]
    assert decode(attributes[A.COMPLETION_LOGPROBS]) == [-0.5, -0.25]
    assert attributes[A.POLICY_VERSION] == 4 and A.TOKEN_IDS_MISSING not in attributes
    assert (stats.with_tokens, sum(stats.missing.values())) == (1, 0) and stats.report() is None


def test_int_arrays_on_request():
    attributes = token_attributes(PLAN, Tokens(**TOKENS), "array")
    assert attributes[A.PROMPT_TOKEN_IDS] == [1, 2] and attributes[A.COMPLETION_LOGPROBS] == [-0.5, -0.25]


@pytest.mark.parametrize("bad", [[1, "x"], [3_000_000_000], [1.5], "12", {"a": 1}, [[1]], None])
def test_ids_that_are_not_int32_make_a_call_without_token_ids_never_a_crash(bad, stats):
    attributes = token_attributes(PLAN, Tokens(prompt_ids=bad, completion_ids=[3]), "packed")
    assert A.PROMPT_TOKEN_IDS not in attributes and "no token ids" in attributes[A.TOKEN_IDS_MISSING]
    assert sum(stats.missing.values()) == 1


def test_ids_too_big_for_any_json_number_type_make_a_call_without_token_ids(stats):
    raw = b'{"choices":[{"index":0,"token_ids":[123456789012345678901234567890]}],"prompt_token_ids":[1]}'
    body, raw_tokens = split_answer(PLAN, raw)
    assert body == b'{"choices":[{"index":0}]}'  # the agent's answer is whole
    attributes = token_attributes(PLAN, raw_tokens.read(), "packed")
    assert A.COMPLETION_TOKEN_IDS not in attributes and A.TOKEN_IDS_MISSING in attributes


def test_a_call_that_did_not_ask_says_why_and_the_report_names_the_reasons(stats):
    refused = Plan("chat", ask=False, strip_token_ids=False, strip_logprobs=False, stream=False, reason="hosted API x")
    for _ in range(2):
        assert token_attributes(refused, None, "packed") == {A.TOKEN_IDS_MISSING: "hosted API x"}
    token_attributes(PLAN, Tokens(**TOKENS), "packed")
    assert "2 of 3 LLM calls have no exact token ids (2 x hosted API x)" in stats.report()
