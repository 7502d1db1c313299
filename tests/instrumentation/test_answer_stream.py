"""Streamed answers: each SSE event is stripped of what tracerl asked for, however the
bytes are cut into network reads, and the tokens of choice 0 are gathered over the events."""

from __future__ import annotations

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from tracerl.instrumentation.answer_stream import SSERewriter, StreamTokens
from tracerl.instrumentation.request_plan import Plan
from tracerl.schemas import attributes as A

PLAN = Plan("chat", ask=True, strip_token_ids=True, strip_logprobs=True, stream=True)


def event(body: dict, newline: bytes = b"\n") -> bytes:
    return b"data: " + orjson.dumps(body) + newline + newline


def chat_stream(newline: bytes = b"\n") -> bytes:
    """A vLLM-like chat stream: the prompt's ids on the first event, then pieces of the answer."""
    base = {"id": "chatcmpl-1", "model": "m", "policy_version": 3}
    pieces = [("He", [72, 101], [-0.1, -0.2]), ("llo", [108, 108, 111], [-0.3, -0.4, -0.5]), ("", [256], [-0.6])]
    events = [event({**base, A.VLLM_PROMPT_TOKEN_IDS_FIELD: [1, 2, 3],
                     "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None}]}, newline)]
    for text, ids, lps in pieces:
        logprobs = {"content": [{"token": "t", "logprob": lp, "bytes": [], "top_logprobs": []} for lp in lps]}
        choice = {"index": 0, "delta": {"content": text}, A.VLLM_CHOICE_TOKEN_IDS_FIELD: ids, "logprobs": logprobs,
                  "finish_reason": "stop" if not text else None}
        events.append(event({**base, "choices": [choice]}, newline))
    return b"".join(events) + b"data: [DONE]" + newline + newline


def rewrite(raw: bytes, cuts: list[int]) -> tuple[bytes, StreamTokens, list[str]]:
    """``raw`` fed to a rewriter in the reads ``cuts`` makes; what the agent gets, the tokens,
    and when the capture was finished."""
    tokens = StreamTokens(PLAN)
    seen: list[str] = []
    rewriter = SSERewriter(tokens, lambda: seen.append("done"))
    bounds = [0, *sorted(set(cuts)), len(raw)]
    reads = [raw[a:b] for a, b in zip(bounds, bounds[1:])]
    return b"".join(rewriter.rewrite(reads)), tokens, seen


def test_the_agent_gets_every_event_without_the_added_fields():
    out, tokens, seen = rewrite(chat_stream(), [])
    events = [line[6:] for line in out.split(b"\n") if line.startswith(b"data: ")]
    assert events[-1] == b"[DONE]"
    for body in map(orjson.loads, events[:-1]):
        assert A.VLLM_PROMPT_TOKEN_IDS_FIELD not in body
        assert all(A.VLLM_CHOICE_TOKEN_IDS_FIELD not in c and c["logprobs"] is None for c in body["choices"])
    result = tokens.result()
    assert (result.prompt_ids, result.completion_ids) == ([1, 2, 3], [72, 101, 108, 108, 111, 256])
    assert result.logprobs == [-0.1, -0.2, -0.3, -0.4, -0.5, -0.6] and result.policy_version == 3
    assert "".join(tokens.text) == "Hello" and tokens.finish_reason == "stop" and tokens.response_id == "chatcmpl-1"
    assert seen[0] == "done"  # at [DONE], before the agent reads it (its instrumentation ends the span then)


@settings(max_examples=100, deadline=None)
@given(data=st.data(), newline=st.sampled_from([b"\n", b"\r\n"]))
def test_any_cut_into_reads_gives_the_same_stream_and_tokens(data, newline):
    raw = chat_stream(newline)
    cuts = data.draw(st.lists(st.integers(1, len(raw) - 1), max_size=12))
    whole, whole_tokens, _ = rewrite(raw, [])
    out, tokens, _ = rewrite(raw, cuts)
    assert out == whole
    assert tokens.result() == whole_tokens.result()


def test_what_is_not_json_passes_through_untouched():
    raw = b": keep-alive\n\ndata: not json\n\nevent: ping\ndata: {\"x\": 1}\n\n"
    out, tokens, _ = rewrite(raw, [7, 30])
    assert orjson.loads(out.split(b"data: ")[-1]) == {"x": 1} and b"data: not json\n\n" in out
    assert tokens.result().completion_ids is None
