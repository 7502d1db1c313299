"""What may be recorded: credentials never, content only if switched on, redacted by
the user's hook and cut at a size limit. Checked on the Parquet files themselves."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracerl.instrumentation.privacy import ContentPolicy
from tracerl.instrumentation.settings import SDK_DEFAULT, Settings, SettingsError
from tracerl.schemas import attributes as A
from tracerl.schemas import environment as E

API_KEY = "sk-test-SECRETKEY0123456789abcdef"  # the key the conftest gives every agent

AGENT = """
import os, openai
client = openai.OpenAI(base_url=os.environ["BASE_URL"], default_headers={"X-Api-Key": "hdr-SECRET-987654321"})
note = "mail bob@example.com, my other key is sk-live-ABCDEFGHIJKLMNOPQRSTUV " + "x" * 500
client.chat.completions.create(model="m", messages=[{"role": "user", "content": note}])
"""

REDACTOR = """
import re
def mask_emails(key, text):
    return re.sub(r"[\\w.]+@[\\w.]+", "<email>", text)
"""


def all_text(data_dir: Path) -> bytes:
    return b"".join(p.read_bytes() for p in data_dir.glob("spans/**/*.parquet"))


def test_keys_never_and_content_redacted_and_cut(captured, tmp_path: Path):
    (tmp_path / "redact_hook.py").write_text(REDACTOR)
    done = captured.tracerl_run(AGENT, TRACERL_REDACT="redact_hook:mask_emails", TRACERL_MAX_CONTENT_CHARS="300")
    assert done.returncode == 0, done.stderr
    (call,) = captured.llm_calls()
    assert call["completion_token_ids"]  # privacy never costs the tokens
    raw = all_text(captured.data_dir) + str(captured.rows()).encode()
    for secret in (API_KEY, "hdr-SECRET-987654321", "sk-live-ABCDEFGHIJKLMNOPQRSTUV", "bob@example.com"):
        assert secret.encode() not in raw, secret
    assert "<email>" in call["attributes"] and "[REDACTED]" in call["attributes"]
    assert A.TRUNCATED_MARK in call["attributes"]


def test_content_capture_can_be_switched_off(captured):
    done = captured.tracerl_run(AGENT, "--no-content")
    assert done.returncode == 0, done.stderr
    (call,) = captured.llm_calls()
    assert call["completion_token_ids"] and call["prompt_token_ids"]
    assert "bob@example.com" not in call["attributes"] and A.GEN_AI_INPUT_MESSAGES not in call["attributes"]


def settings_with(**changes) -> Settings:
    base = dict(data_dir=Path("."), token_encoding="array", token_capture="auto", capture_content=True,
                max_content_chars=100, redact=None, episode_id=None, task_id=None, split=None, agent_name=None, llm_spans="tracerl",
                openai_agents_api=SDK_DEFAULT)
    return Settings(**{**base, **changes})


def test_the_policy_holds_for_set_attributes_too():
    """The SDK's ``Span.set_attributes`` bypasses ``__setitem__``: answers are policed as well."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from tracerl.instrumentation.processor import TracerlSpanProcessor

    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(TracerlSpanProcessor(settings_with(max_content_chars=40)))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    with provider.get_tracer("t").start_as_current_span("chat m") as span:
        span.set_attributes({A.GEN_AI_OUTPUT_MESSAGES: "the key is sk-live-ABCDEFGHIJKLMNOPQRSTUV " + "y" * 100,
                             "http.request.header.authorization": "Bearer abc", A.GEN_AI_USAGE_OUTPUT_TOKENS: 3})
    (finished,) = memory.get_finished_spans()
    text = finished.attributes[A.GEN_AI_OUTPUT_MESSAGES]
    assert "sk-live" not in text and "[REDACTED]" in text and text.endswith(A.TRUNCATED_MARK)
    assert "http.request.header.authorization" not in finished.attributes
    assert finished.attributes[A.GEN_AI_USAGE_OUTPUT_TOKENS] == 3


@pytest.mark.parametrize(
    "key",
    [
        A.GEN_AI_INPUT_MESSAGES,
        A.GEN_AI_TOOL_CALL_ARGUMENTS_ATTRIBUTE,
        f"{A.OPENLLMETRY_PROMPTS}.0.content",
        A.TRACELOOP_ENTITY_INPUT,
        f"{A.OPENINFERENCE_INPUT_MESSAGES}.0.message.content",
        A.OPENINFERENCE_OUTPUT_VALUE,
        f"{A.CONTENT_PREFIX}note",
    ],
)
def test_content_of_every_convention_is_kept_out_when_content_is_off(key):
    policy = ContentPolicy(settings_with(capture_content=False))
    assert policy.clean(key, "what the user said") is None
    assert policy.clean(A.GEN_AI_USAGE_INPUT_TOKENS, 3) == 3 and policy.clean(A.GEN_AI_REQUEST_MODEL, "m") == "m"


def test_a_bad_redaction_hook_is_named_in_the_error():
    with pytest.raises(SettingsError, match="TRACERL_REDACT='nope'"):
        ContentPolicy(settings_with(redact="nope"))
    with pytest.raises(SettingsError, match="cannot be loaded"):
        ContentPolicy(settings_with(redact="no_such_module_xyz:f"))


def test_bad_settings_name_the_variable(monkeypatch):
    from tracerl.instrumentation import settings as S

    for name, value in ((E.TOKEN_ENCODING_ENV, "zip"), (E.CAPTURE_CONTENT_ENV, "maybe"), (E.MAX_CONTENT_CHARS_ENV, "-1")):
        monkeypatch.setenv(name, value)
        S.settings.cache_clear()
        with pytest.raises(SettingsError, match=name):
            S.settings()
        monkeypatch.delenv(name)
    S.settings.cache_clear()
