"""Whole answers: what tracerl asked for is cut out of the JSON on the agent's thread,
unparsed, and read later off it.

A vLLM answer with token ids and log-probs is ~7 KB, most of it the prompt's ids and one
small object per generated token; parsing it was the largest cost on the call's path (and
those objects fed the garbage collector). :func:`split_answer` skips over the members with
msgspec, keeping them as raw bytes (:class:`RawTokens`), and hands the agent's SDK the rest
re-joined verbatim; the span finisher (or the gateway) reads the cut members later.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec
import orjson

from tracerl.instrumentation import responses_api
from tracerl.instrumentation.call_tokens import Tokens, choice_logprobs, read_policy_version
from tracerl.instrumentation.request_plan import Plan
from tracerl.schemas import attributes as A

# A JSON object with its members' values left as bytes: skipped over (and validated) in C,
# never turned into Python objects, and written back verbatim.
_MEMBERS = msgspec.json.Decoder(dict[str, msgspec.Raw])
_CHOICES = msgspec.json.Decoder(list[dict[str, msgspec.Raw]])
_ENCODER = msgspec.json.Encoder()
_NULL = msgspec.Raw(b"null")


@dataclass(frozen=True)
class RawTokens:
    """The token members of a whole answer as the server wrote them (choice 0's), unparsed
    until :meth:`read`: bytes cost the calling thread nothing and the garbage collector
    nothing while they wait for the span finisher."""

    kind: str
    # of a Responses answer: its input_messages, output_messages and output members; of a Messages
    # answer: its top-level prompt_token_ids, token_ids and logprobs
    prompt_ids: msgspec.Raw | None = None
    completion_ids: msgspec.Raw | None = None
    logprobs: msgspec.Raw | None = None
    policy_version: msgspec.Raw | None = None

    def read(self, headers: Mapping[str, str] | None = None) -> Tokens:
        if self.kind == "responses":  # input_messages, output_messages and output (responses_api.py)
            return responses_api.read_tokens(self.prompt_ids, self.completion_ids, self.logprobs,
                                             _parse(self.policy_version), headers)
        return Tokens(
            prompt_ids=_parse(self.prompt_ids),
            completion_ids=_parse(self.completion_ids),
            logprobs=choice_logprobs(self.kind, self.logprobs),
            policy_version=read_policy_version(_parse(self.policy_version), headers),
        )


def _parse(member: msgspec.Raw | None) -> Any:
    if member is None:
        return None
    try:
        return orjson.loads(memoryview(member))
    except orjson.JSONDecodeError:  # what msgspec skips over and orjson refuses (ints beyond 64 bits)
        return None


def split_answer(plan: Plan, raw: bytes) -> tuple[bytes, RawTokens] | None:
    """A whole answer split into what the agent's SDK is given (``raw`` without what
    :func:`~tracerl.instrumentation.request_plan.plan_request` added) and its tokens,
    both without parsing their values.

    This runs on the agent's thread: the prompt's ids (most of a vLLM answer) and the
    log-probs (a few objects per token) are only skipped over, and the rest is written
    back as it came. ``None`` if ``raw`` is not a JSON object (the agent then gets it as
    it came).
    """
    try:
        members = _MEMBERS.decode(raw)
    except msgspec.DecodeError:  # malformed JSON, or valid JSON that is not an object
        return None
    pick = members.pop if plan.strip_token_ids else members.get
    if plan.kind == "responses":
        inputs, outputs = pick(responses_api.INPUT_MESSAGES_FIELD, None), pick(responses_api.OUTPUT_MESSAGES_FIELD, None)
        tokens = RawTokens(plan.kind, inputs, outputs, members.get("output"), members.get(A.POLICY_VERSION_FIELD))
        return (_ENCODER.encode(members) if plan.strip_token_ids else raw), tokens
    prompt_ids = pick(A.VLLM_PROMPT_TOKEN_IDS_FIELD, None)
    if plan.kind == "messages":  # tracerl serve's fields, at the message's top level (messages_api.py)
        completion_ids = pick(A.VLLM_CHOICE_TOKEN_IDS_FIELD, None)
        logprobs = (members.pop if plan.strip_logprobs else members.get)(A.MESSAGES_LOGPROBS_FIELD, None)
        tokens = RawTokens(plan.kind, prompt_ids, completion_ids, logprobs, members.get(A.POLICY_VERSION_FIELD))
        return (_ENCODER.encode(members) if plan.strip_token_ids or plan.strip_logprobs else raw), tokens
    completion_ids = logprobs = None
    if "choices" in members:
        try:
            choices = _CHOICES.decode(members["choices"])
        except msgspec.DecodeError:  # not a list of objects: nothing of ours there
            choices = ()
        for choice in choices:
            ids = (choice.pop if plan.strip_token_ids else choice.get)(A.VLLM_CHOICE_TOKEN_IDS_FIELD, None)
            index = choice.get("index")
            if index is None or bytes(index) == b"0":
                completion_ids, logprobs = ids, choice.get("logprobs")
            if plan.strip_logprobs and "logprobs" in choice:
                choice["logprobs"] = _NULL
        if choices and (plan.strip_token_ids or plan.strip_logprobs):
            members["choices"] = msgspec.Raw(_ENCODER.encode(choices))
    tokens = RawTokens(plan.kind, prompt_ids, completion_ids, logprobs, members.get(A.POLICY_VERSION_FIELD))
    return _ENCODER.encode(members), tokens
