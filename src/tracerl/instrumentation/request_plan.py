"""What tracerl adds to an LLM request, so that exactly that is removed from its answer.

The agent must see exactly what it would see without tracerl: a request is rewritten to
ask vLLM (or tracerl's server) for what training needs (``return_token_ids``, log-probs)
only where the agent did not ask for them itself, and the :class:`Plan` remembers which
fields were added (and are needed by nobody else in the process), for
:mod:`~tracerl.instrumentation.answer_split` (whole answers) and
:mod:`~tracerl.instrumentation.answer_stream` (streamed ones) to take out again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tracerl.schemas import attributes as A

CHAT_PATH = "/chat/completions"
COMPLETIONS_PATH = "/completions"
RESPONSES_PATH = "/responses"  # the Responses API (tracerl.instrumentation.responses_api)
MESSAGES_PATH = "/messages"  # Anthropic's Messages API (tracerl.instrumentation.messages_api)
RESPONSES_MESSAGES_FIELD = "enable_response_messages"  # vLLM's: the prompt's and completion's ids in the answer


def endpoint_kind(path: str) -> str | None:
    """``chat``, ``completions``, ``responses`` (OpenAI) or ``messages`` (Anthropic) for a generation path, else ``None``."""
    if path.endswith(CHAT_PATH):
        return "chat"
    if path.endswith(COMPLETIONS_PATH):
        return "completions"
    if path.endswith(RESPONSES_PATH):
        return "responses"
    if path.endswith(MESSAGES_PATH):
        return "messages"
    return None


def is_llm_request(kind: str, body: Mapping[str, Any]) -> bool:
    """Whether a JSON body posted to an LLM path is an LLM request. A path ending in ``/responses``
    may be another service's (a survey's): a Responses request names a model and its input. A
    path ending in ``/messages`` may be OpenAI's Assistants API's (``/threads/{id}/messages``): a
    Messages request names a model and its messages."""
    if kind == "messages":
        return isinstance(body.get("model"), str) and isinstance(body.get("messages"), list)
    if kind != "responses":
        return True
    return isinstance(body.get("model"), str) and any(key in body for key in ("input", "previous_response_id", "prompt"))


@dataclass(frozen=True)
class Plan:
    """What was added to one request, so exactly that is removed from its response."""

    kind: str  # chat | completions | responses | messages
    ask: bool  # token ids and log-probs were asked for
    strip_token_ids: bool  # (responses: the input_messages and output_messages members)
    strip_logprobs: bool
    stream: bool
    reason: str | None = None  # why tokens were not asked for


def plan_request(
    kind: str, body: Mapping[str, Any], ask: bool, reason: str | None = None, *, others_read_answer: bool = False,
) -> tuple[Plan, dict | None]:
    """The plan for a request body and the body to send (``None``: send it unchanged).

    ``others_read_answer``: another instrumentation in the process reads token ids and
    log-probs from the answer (:mod:`~tracerl.instrumentation.answer_readers`); what tracerl
    adds then stays in the answer, as someone besides tracerl needs it.
    """
    stream = bool(body.get("stream"))
    if ask and kind in ("chat", "messages") and body.get("top_logprobs") and not body.get("logprobs"):
        # adding logprobs would turn the request the server refuses into one it answers
        ask, reason = False, "top_logprobs without logprobs: sent unchanged, the server's answer is the agent's"
    if not ask:
        return Plan(kind, False, False, False, stream, reason), None
    new = dict(body)
    if kind == "responses":  # one switch returns the ids, and the log-probs where the server has them
        new[RESPONSES_MESSAGES_FIELD] = True
        return Plan(kind, True, not body.get(RESPONSES_MESSAGES_FIELD) and not others_read_answer, False, stream), new
    strip_ids = not body.get(A.VLLM_RETURN_TOKEN_IDS_FIELD) and not others_read_answer
    new[A.VLLM_RETURN_TOKEN_IDS_FIELD] = True
    if kind in ("chat", "messages"):  # Messages: tracerl serve's fields, chat's names (messages_api.py)
        strip_logprobs = not body.get("logprobs") and not others_read_answer
        new["logprobs"] = True
    else:
        strip_logprobs = body.get("logprobs") is None and not others_read_answer
        if body.get("logprobs") is None:
            new["logprobs"] = 1
    return Plan(kind, True, strip_ids, strip_logprobs, stream), new
