"""Which policy version the middleware puts on an answer of ``vllm serve`` (the real server: tests/trainer/vllm)."""

from __future__ import annotations

import json

import pytest

from tracerl.trainer.serving.vllm_policy_version import served_version


def request(model: str) -> bytes:
    return json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}]}).encode()


@pytest.mark.parametrize(("weight_version", "model", "expected"), [
    ("3", "policy", 3),  # one policy: vLLM's weight version is its version, whatever the model name
    ("default", "policy", None),  # vLLM before any version was recorded: no version rather than a wrong one
    ('{"checker": 1, "writer": 4}', "writer", 4),  # one vLLM, an adapter per policy: the one the request named
    ('{"checker": 1, "writer": 4}', "checker", 1),
    ('{"checker": 1, "writer": 4}', "policy-base", None),  # the base model is no policy's
    ('{"writer": "4"}', "writer", None),  # only integers are versions
    ("{not json", "writer", None),
])
def test_the_version_is_the_requested_adapters_own(weight_version, model, expected):
    assert served_version(weight_version, request(model)) == expected


def test_a_body_that_is_not_json_gets_no_version_from_an_adapter_table():
    assert served_version('{"writer": 4}', b"\x00garbage") is None
    assert served_version("7", b"") == 7
