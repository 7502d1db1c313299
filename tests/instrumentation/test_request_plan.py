"""What tracerl adds to a request is what it takes out of the answer: never a field the
agent asked for itself."""

from __future__ import annotations

import pytest

from tracerl.instrumentation.request_plan import endpoint_kind, is_llm_request, plan_request

MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    ("path", "kind"),
    [("/v1/chat/completions", "chat"), ("/v1/completions", "completions"), ("/v1/responses", "responses"),
     ("/v1/responses/resp_1/cancel", None), ("/v1/responses/input_tokens", None), ("/v1/embeddings", None), ("/v1/models", None)],
)
def test_only_generation_endpoints_are_planned(path, kind):
    assert endpoint_kind(path) == kind


def test_a_chat_request_asks_for_ids_and_log_probs_and_the_agent_s_body_is_left_alone():
    body = {"model": "m", "messages": MESSAGES}
    plan, sent = plan_request("chat", body, ask=True)
    assert sent == {**body, "return_token_ids": True, "logprobs": True} and body == {"model": "m", "messages": MESSAGES}
    assert plan.strip_token_ids and plan.strip_logprobs and not plan.stream


def test_what_the_agent_asked_for_itself_stays_in_the_answer():
    plan, _ = plan_request("chat", {"messages": MESSAGES, "logprobs": True, "return_token_ids": True, "stream": True}, ask=True)
    assert not plan.strip_token_ids and not plan.strip_logprobs and plan.stream


@pytest.mark.parametrize(("asked", "strip", "sent"), [(None, True, 1), (0, False, 0), (5, False, 5)])
def test_completions_log_probs_are_a_count_and_zero_is_the_agent_s_own(asked, strip, sent):
    body = {"prompt": "2+2="} if asked is None else {"prompt": "2+2=", "logprobs": asked}
    plan, new = plan_request("completions", body, ask=True)
    assert plan.strip_logprobs is strip and new["logprobs"] == sent


def test_a_refused_request_is_sent_unchanged_with_the_reason():
    plan, sent = plan_request("chat", {"messages": MESSAGES}, ask=False, reason="hosted API api.openai.com")
    assert sent is None and not plan.ask and plan.reason == "hosted API api.openai.com"


def test_a_request_the_server_must_refuse_is_not_made_valid_by_capture():
    # top_logprobs without logprobs is a 400 from vLLM and OpenAI; adding logprobs would answer it
    plan, sent = plan_request("chat", {"messages": MESSAGES, "top_logprobs": 2}, ask=True)
    assert sent is None and not plan.ask and "top_logprobs without logprobs" in plan.reason


@pytest.mark.parametrize("kind", ["chat", "completions"])
def test_fields_another_instrumentation_reads_from_the_answer_stay_in_it(kind):
    # agentlightning's patched AgentOps records token ids and log-probs from the answer after tracerl
    body = {"messages": MESSAGES} if kind == "chat" else {"prompt": "2+2="}
    plan, sent = plan_request(kind, body, ask=True, others_read_answer=True)
    assert sent["return_token_ids"] and sent["logprobs"]
    assert not plan.strip_token_ids and not plan.strip_logprobs


def test_a_responses_request_asks_for_vllms_response_messages_only():
    body = {"model": "m", "input": "hi", "include": ["message.output_text.logprobs"]}
    plan, sent = plan_request("responses", body, ask=True)
    assert sent == {**body, "enable_response_messages": True} and "enable_response_messages" not in body
    assert plan.kind == "responses" and plan.strip_token_ids and not plan.strip_logprobs
    plan, _ = plan_request("responses", {**body, "enable_response_messages": True}, ask=True)
    assert not plan.strip_token_ids


def test_a_body_posted_to_another_services_responses_path_is_no_llm_request():
    assert is_llm_request("responses", {"model": "m", "input": "hi"})
    assert is_llm_request("responses", {"model": "m", "previous_response_id": "resp_1"})
    assert not is_llm_request("responses", {"survey": 3, "answers": ["yes"]})
    assert is_llm_request("chat", {})  # chat and completions paths are judged by their path alone, as before
