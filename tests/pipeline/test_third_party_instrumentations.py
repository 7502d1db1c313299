"""Agents traced by other projects' OpenAI instrumentations, with no tracerl in their process.

Teams that already trace with the official OpenTelemetry instrumentation
(``opentelemetry-instrumentation-openai-v2``, content as span attributes or as log records),
OpenLLMetry's (``opentelemetry-instrumentation-openai``) or OpenInference's
(``openinference-instrumentation-openai``) keep it: the agent, in a venv of its own holding
the OpenAI SDK, the OTel SDK with its OTLP/HTTP exporter and that instrumentation alone, calls
``tracerl serve`` and exports to ``tracerl collector serve``. Every call becomes an LLM call
with its messages; without token ids (none of them records the ids the server sampled) the
calls stay out of training, counted by reason.

The venvs are ``.venv-otel-<name>``, pinned in ``testing/otel_venvs/<name>.txt`` and built by
``.ci/run`` (``otel_venvs``) with its other installs, not during the test.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import httpx
import pytest

from transformers import AutoTokenizer

from tracerl.pipeline import build_dataset, dataset_table
from tracerl.pipeline.build import analyze
from tracerl.pipeline.messages import chat_messages
from tracerl.pipeline.options import BuildOptions
from tracerl.pipeline.writer import call_messages
from tracerl.schemas import attributes as A
from tracerl.schemas import environment as E
from tracerl.trainer.serving.app import running_server
from tracerl.trainer.tiny_model import ensure_tiny_model
from tracerl_testing.installed import require

pytestmark = pytest.mark.slow  # an agent per instrumentation, and a dataset built twice from its spans

REPO = Path(__file__).resolve().parents[2]

AGENT = """
import os, sys, openai
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

collector, which = os.environ["COLLECTOR"], sys.argv[1]
provider = TracerProvider()
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=collector + "/v1/traces")))
trace.set_tracer_provider(provider)
if which == "openai-v2":
    from opentelemetry import _logs
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
    logs = LoggerProvider()
    logs.add_log_record_processor(BatchLogRecordProcessor(OTLPLogExporter(endpoint=collector + "/v1/logs")))
    _logs.set_logger_provider(logs)
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
elif which == "openllmetry":
    from opentelemetry.instrumentation.openai import OpenAIInstrumentor
else:
    from openinference.instrumentation.openai import OpenAIInstrumentor
OpenAIInstrumentor().instrument()

client = openai.OpenAI(base_url=os.environ["BASE_URL"], api_key="none")
model = os.environ["MODEL"]  # not client.models.list(): OpenInference records that request as an LLM span too
tracer = trace.get_tracer("agent")
for episode in range(2):
    with tracer.start_as_current_span("episode"):  # the trace is the episode
        messages = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": f"What is 2 + {episode}?"}]
        first = client.chat.completions.create(model=model, messages=messages, max_tokens=6, temperature=0)
        messages += [{"role": "assistant", "content": first.choices[0].message.content}, {"role": "user", "content": "Sure?"}]
        client.chat.completions.create(model=model, messages=messages, max_tokens=6, temperature=0)
provider.shutdown()
if which == "openai-v2":
    logs.shutdown()
"""

# (instrumentation, environment of its content capture, the content layout the pipeline finds)
CASES = [
    ("openai-v2", {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "EVENT_ONLY",
                   E.SEMCONV_STABILITY_OPT_IN_ENV: "gen_ai_latest_experimental"}, "gen_ai.log"),
    ("openai-v2", {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "SPAN_ONLY",
                   E.SEMCONV_STABILITY_OPT_IN_ENV: "gen_ai_latest_experimental"}, "gen_ai.messages"),
    ("openllmetry", {E.TRACELOOP_TRACE_CONTENT_ENV: "true"}, "gen_ai.messages"),  # 0.62 writes the GenAI 1.37+ attributes
    ("openinference", {}, "openinference"),
]


def agent_python(which: str) -> Path:
    """The python of ``.venv-otel-<which>``, built from today's pins (the copy of them it holds says so);
    missing or built from other pins, the test skips (under CI, fails) saying how to build it."""
    venv, pins = f".venv-otel-{which}", f"testing/otel_venvs/{which}.txt"
    built = REPO / venv / "requirements.txt"
    current = (REPO / venv / "bin" / "python").is_file() and built.is_file() and built.read_text() == (REPO / pins).read_text()
    require(current, f"{venv} as {pins} pins it",
            f"rm -rf {venv} && python3 -m venv {venv} && {venv}/bin/pip install -r {pins} && cp {pins} {venv}/requirements.txt"
            " (.ci/run's otel_venvs, from the repository root)")
    return REPO / venv / "bin" / "python"


@pytest.fixture(scope="module")
def policy_server():
    with running_server() as server:
        yield server


@pytest.mark.parametrize(("which", "env", "layout"), CASES, ids=[f"{c[0]}-{c[2]}" for c in CASES])
def test_every_call_arrives_with_its_messages_and_trains_only_when_retokenized(
    which, env, layout, policy_server, start_collector, data_dir, tmp_path
):
    python = agent_python(which)
    model = httpx.get(f"{policy_server.base_url}/models").json()["data"][0]["id"]
    collector = start_collector(flush_interval_s=0.2, grpc=False)
    run_env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "TRACERL_", "TRACELOOP_"))}
    done = subprocess.run([str(python), "-c", AGENT, which], capture_output=True, text=True, timeout=180, cwd=python.parent,
                          env={**run_env, **env, "COLLECTOR": collector.http_url(), "BASE_URL": policy_server.base_url,
                               "MODEL": model})
    assert done.returncode == 0, done.stderr[-3000:]
    collector.stop()

    analysis = analyze(data_dir, BuildOptions())
    rows = call_messages(analysis.con, analysis.files, analysis.con.sql("SELECT * FROM llm_calls").to_arrow_table()).to_pylist()
    calls = [(r["episode_id"], r["content_layout"], r["input_messages"], r["output_messages"]) for r in sorted(rows, key=lambda r: r["start_ns"])]
    assert len(calls) == 4 and len({episode for episode, *_ in calls}) == 2
    for _, found_layout, inputs, outputs in calls:
        assert found_layout == layout
        said = [m["content"] for m in chat_messages(inputs)]
        assert said[0] == "Answer briefly." and said[1].startswith("What is 2 + ")
        assert len(chat_messages(outputs)) == 1
    second_prompt = [m["content"] for m in chat_messages(calls[1][2])]
    assert second_prompt[-1] == "Sure?" and len(second_prompt) == 4

    rewards = tmp_path / "rewards.csv"  # rewarded episodes, so that what keeps the calls out is their missing token ids
    rewards.write_text("trace_id,value\n" + "".join(f"{trace},1.0\n" for trace in sorted({r["trace_id"] for r in rows})))
    manifest = build_dataset(data_dir, tmp_path / "ds", rewards=(str(rewards),))
    assert manifest["counts"]["llm_calls"]["skipped"] == {"no_token_ids": 4}
    assert manifest["counts"]["spans"]["content_layouts"] == {layout: 4}

    # opted in: the calls train with ids rebuilt from their messages, each row marked so; the prompts are
    # the ones the server itself makes of the same messages (asked here for its ids)
    manifest = build_dataset(data_dir, tmp_path / "retokenized", rewards=(str(rewards),), retokenize=str(ensure_tiny_model()))
    assert manifest["counts"]["llm_calls"]["skipped"] == {} and manifest["counts"]["llm_calls"]["retokenized"] == 4
    assert any("rebuilt from their messages" in w for w in manifest["warnings"])
    rebuilt = dataset_table(tmp_path / "retokenized").to_pylist()
    eos = AutoTokenizer.from_pretrained(ensure_tiny_model()).eos_token_id
    assert {r["token_source"] for r in rebuilt} == {"retokenized"} and all(r["response_logprobs"] is None for r in rebuilt)
    for row in rebuilt:
        served = httpx.post(f"{policy_server.base_url}/chat/completions", json={
            "model": model, "messages": chat_messages(row["input_messages"]), "max_tokens": 1, A.VLLM_RETURN_TOKEN_IDS_FIELD: True,
        }).json()
        assert row["prompt_token_ids"] == served[A.VLLM_PROMPT_TOKEN_IDS_FIELD]
        # the end-of-sequence token closes a response unless the instrumentation recorded a cut at the token limit
        finish = json.loads(row["output_messages"])[-1].get("finish_reason")
        assert (row["response_token_ids"][-1] == eos) == (finish != "length"), (finish, row["response_token_ids"])
