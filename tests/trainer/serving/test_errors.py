"""Bad requests get a 400 with an OpenAI-style error naming the bad field; the server keeps serving."""

from __future__ import annotations

import httpx
import openai
import pytest

from tracerl.trainer.serving.app import running_server


USER = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def server(policy_server):
    return policy_server


def _post(server, path: str, body) -> httpx.Response:
    kwargs = {"content": body} if isinstance(body, (str, bytes)) else {"json": body}
    return httpx.post(f"{server.base_url}{path}", headers={"content-type": "application/json"}, **kwargs)


@pytest.mark.parametrize(
    ("path", "body", "param", "words"),
    [
        ("/chat/completions", {"messages": []}, "messages", "at least 1"),
        ("/chat/completions", {}, "messages", "required"),
        ("/chat/completions", {"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role", "'user'"),
        ("/chat/completions", {"messages": USER, "temperature": "hot"}, "temperature", "number"),
        ("/chat/completions", {"messages": USER, "temperature": 3}, "temperature", "less than or equal to 2"),
        ("/chat/completions", {"messages": USER, "max_tokens": 0}, "max_tokens", "greater than or equal to 1"),
        ("/chat/completions", {"messages": USER, "max_tokens": 100000}, "max_tokens", "maximum context length"),
        ("/chat/completions", {"messages": USER, "max_completion_tokens": 100000}, "max_completion_tokens", "context"),
        ("/chat/completions", {"messages": USER, "n": 0}, "n", "greater than or equal to 1"),
        ("/chat/completions", {"messages": USER, "top_p": 0}, "top_p", "greater than 0"),
        ("/chat/completions", {"messages": USER, "top_logprobs": 2}, "top_logprobs", "logprobs: true"),
        ("/chat/completions", {"messages": [{"role": "user", "content": "x" * 5000}]}, "messages", "Shorten the prompt"),
        (
            "/chat/completions",
            {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:"}}]}]},
            "messages[0].content",
            "'image_url'",
        ),
        ("/chat/completions", {"messages": USER, "frequency_penalty": 0.5}, "frequency_penalty", "does not implement"),
        ("/chat/completions", {"messages": USER, "stream_options": {"include_usage": "maybe"}}, "stream_options.include_usage", "boolean"),
        ("/chat/completions", {"messages": USER, "tools": [{"type": "function", "function": {}}]}, "tools[0].function.name", "required"),
        ("/completions", {"prompt": "x", "logit_bias": {"5": 100}}, "logit_bias", "does not implement"),
        ("/completions", {"prompt": "x", "logprobs": 50}, "logprobs", "less than or equal to 20"),
        ("/completions", {"prompt": [1, 2, 100000]}, "prompt", "outside the vocabulary"),
        ("/completions", {"prompt": ""}, "prompt", "empty"),
        ("/completions", {"prompt": "x", "echo": True}, "echo", "not supported"),
        ("/completions", {"max_tokens": 3}, "prompt", "required"),
        ("/load_weights", {"path": "/nonexistent/checkpoint"}, "path", "no config.json"),
        ("/load_weights", {"version": 3}, "path", "required"),
        ("/load_weights", {"path": "/tmp", "version": -1}, "version", "greater than or equal to 0"),
    ],
)
def test_bad_field_is_named(server, path, body, param, words):
    response = _post(server, path, body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param
    assert error["type"] == "invalid_request_error"
    assert words in error["message"]


@pytest.mark.parametrize("raw", ["{not json", "[1, 2]", '"text"'])
def test_body_must_be_a_json_object(server, raw):
    response = _post(server, "/chat/completions", raw)
    assert response.status_code == 400
    assert response.json()["error"]["message"].startswith(("the request body is not valid JSON", "the request body must be"))


def test_unknown_route_is_a_json_404_that_names_the_routes_served(server):
    response = httpx.get(f"{server.base_url}/nothing-here")
    assert response.status_code == 404
    message = response.json()["error"]["message"]
    assert "/v1/nothing-here" in message and "POST /v1/chat/completions" in message


def test_the_responses_api_is_served_and_its_bad_requests_name_the_field(server):
    """The OpenAI Agents SDK calls /v1/responses by default (test_responses_api.py has the rest)."""
    client = openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0)
    assert client.responses.create(model="m", input="hi", max_output_tokens=1).object == "response"
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model="m", input="hi", previous_response_id="resp_unknown")
    assert "previous_response_id" in str(info.value)


def test_openai_client_raises_bad_request_with_the_message(server):
    client = openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0)
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="m", messages=USER, max_tokens=10**6)
    assert "maximum context length" in str(info.value)


def test_server_still_answers_after_bad_requests(server):
    for _ in range(3):
        _post(server, "/chat/completions", "{broken")
    reply = _post(server, "/chat/completions", {"messages": USER, "max_tokens": 2}).json()
    assert reply["usage"]["completion_tokens"] >= 1


def test_neutral_values_of_unimplemented_controls_are_accepted(server):
    body = {"messages": USER, "max_tokens": 1, "frequency_penalty": 0, "presence_penalty": 0.0, "logit_bias": {}}
    assert _post(server, "/chat/completions", body).status_code == 200


def test_a_failing_forward_pass_fails_its_requests_and_the_server_recovers():
    with running_server() as own:
        model = own.app.state.engine.model
        healthy = model.forward

        def broken(*args, **kwargs):
            raise RuntimeError("simulated device failure")

        model.forward = broken
        response = _post(own, "/chat/completions", {"messages": USER, "max_tokens": 3})
        assert response.status_code == 500
        assert response.json()["error"] == {
            "message": "generation failed: RuntimeError: simulated device failure",
            "type": "server_error",
            "param": None,
            "code": None,
        }
        model.forward = healthy
        assert _post(own, "/chat/completions", {"messages": USER, "max_tokens": 3}).status_code == 200
