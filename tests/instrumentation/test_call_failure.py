"""A failed LLM call's span says it failed, why (``error.type``) and what the server said."""

from __future__ import annotations

import json

import pytest

from tracerl.instrumentation.call_failure import CallFailure
from tracerl.pipeline.options import BuildOptions
from tracerl.pipeline.doctor import diagnose
from tracerl.schemas import attributes as A


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"error": {"message": "max_tokens is too large", "type": "BadRequestError"}}', "max_tokens is too large"),
        (b'{"object": "error", "message": "model m does not exist", "code": 404}', "model m does not exist"),
        (b'{"detail": [{"loc": ["body", "messages"], "msg": "field required"}]}', '[{"loc":["body","messages"],"msg":"field required"}]'),
        (b"<html>Bad Gateway</html>", "<html>Bad Gateway</html>"),
        (b"", "HTTP 502"),
    ],
)
def test_the_servers_message_is_read_from_the_answers_it_gives(body, message):
    assert CallFailure.from_status(502, body).message() == message


def test_a_call_that_got_no_answer_is_named_by_its_exception():
    failure = CallFailure.from_exception(ConnectionRefusedError("[Errno 111] Connection refused"))
    assert (failure.error_type, failure.message()) == ("ConnectionRefusedError", "[Errno 111] Connection refused")


def test_failed_calls_are_recorded_as_failed_with_the_servers_message(captured, server):
    done = captured.tracerl_run(
        """
        import os, openai
        client = openai.OpenAI(base_url=os.environ["BASE_URL"], max_retries=0)
        try:
            client.chat.completions.create(model="missing-model", messages=[{"role": "user", "content": "hi"}])
        except openai.NotFoundError as error:
            print("AGENT SAW", error.status_code)
        refused = openai.OpenAI(base_url="http://127.0.0.1:9/v1", max_retries=0)
        try:
            refused.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], stream=True)
        except openai.APIConnectionError:
            print("AGENT SAW no answer")
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        """,
        "--task-id", "t-1", "--episode-id", "ep-failing",
    )
    assert done.returncode == 0, done.stderr
    assert "AGENT SAW 404" in done.stdout and "AGENT SAW no answer" in done.stdout  # errors reach the agent unchanged
    missing, refused, ok = captured.llm_calls()
    assert (missing["status_code"], json.loads(missing["attributes"])[A.ERROR_TYPE]) == ("ERROR", "404")
    assert missing["status_message"] == "The model `missing-model` does not exist."
    assert A.TOKEN_IDS_MISSING not in json.loads(missing["attributes"])  # failed, not "served without token ids"
    assert refused["status_code"] == "ERROR" and json.loads(refused["attributes"])[A.ERROR_TYPE].endswith(".ConnectError")  # httpx, or httpx2 under openai 3
    assert ok["status_code"] == "UNSET" and ok["completion_token_ids"] == server.calls[-1].token_ids
    assert "1 with exact token ids, 0 without, 2 failed" in done.stderr
    assert "tracerl: 2 LLM calls failed (1 x 404: " in done.stderr


    (transition,), _ = captured.build("ep-failing")  # the call that succeeded
    assert transition["response_token_ids"] == server.calls[-1].token_ids
    notes = diagnose(captured.data_dir, BuildOptions())["notes"]
    assert "2 LLM call(s) failed (their spans' error.type and status message say why)" in notes
    assert not [n for n in notes if "without prompt/completion token ids" in n]
    (messages,) = [n for n in notes if n.startswith("failed LLM calls, by the server's message")]
    assert "1 x The model `missing-model` does not exist." in messages
