"""The instrumentation tests' fixtures: a vLLM-like server on loopback
(``tracerl_testing.scripted_server``), an in-memory view of this process's spans, a
runner for agent scripts captured by environment alone, and the tiny model taught a tool
round trip that each API's capture tests serve. What other areas share too is in
the root ``tests/conftest.py``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tracerl.core.chat_template import template_prompt_ids
from tracerl.instrumentation import settings as S
from tracerl.instrumentation.setup import install_hooks
from tracerl.schemas import attributes as A
from tracerl.schemas import environment as E
from tracerl.schemas.tokens import decode
from tracerl_testing.installed import require_module
from tracerl_testing.scripted_server import ScriptedServer, running_scripted_server
from tracerl_testing.tables import span_rows


@pytest.fixture(scope="session")
def scripted() -> Iterator[ScriptedServer]:
    with running_scripted_server() as server:
        yield server


@pytest.fixture()
def server(scripted: ScriptedServer) -> ScriptedServer:
    scripted.calls.clear()
    return scripted


class FlushingMemoryExporter(InMemorySpanExporter):
    """Finished spans as an exporter has them after a flush: tracerl finishes its LLM-call
    spans off the calling thread, so a reader flushes the provider first, like exit does."""

    def get_finished_spans(self):
        trace.get_tracer_provider().force_flush()
        return super().get_finished_spans()


@pytest.fixture(scope="session")
def _memory_exporter() -> InMemorySpanExporter:
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        trace.set_tracer_provider(TracerProvider())
        provider = trace.get_tracer_provider()
    exporter = FlushingMemoryExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    S.settings.cache_clear()
    install_hooks(provider)
    return exporter


@pytest.fixture()
def spans(_memory_exporter: InMemorySpanExporter) -> InMemorySpanExporter:
    """This process's finished spans (tracerl hooks installed), emptied per test."""
    trace.get_tracer_provider().force_flush()  # earlier tests' spans still being finished
    _memory_exporter.clear()
    return _memory_exporter


class Captured:
    """Run an agent script as its own process, with capture switched on by env only."""

    def __init__(self, tmp_path: Path, base_url: str) -> None:
        self.tmp_path = tmp_path
        self.base_url = base_url
        self.data_dir = tmp_path / "data"

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "TRACERL_", "TRACELOOP_"))}
        env.update(
            BASE_URL=self.base_url,
            OPENAI_BASE_URL=self.base_url,
            OPENAI_API_KEY="sk-test-SECRETKEY0123456789abcdef",
            PYTHONUNBUFFERED="1",
        )
        env.update(extra)
        return env

    def script(self, source: str) -> Path:
        path = self.tmp_path / "agent.py"
        path.write_text(textwrap.dedent(source))
        return path

    def tracerl_run(self, source: str, *options: str, python: str = sys.executable, **env: str) -> subprocess.CompletedProcess:
        """``tracerl run`` the agent with ``python`` (another venv's, for clients this one cannot hold)."""
        script = self.script(source)
        command = [str(Path(python).parent / "tracerl"), "run", "--data-dir", str(self.data_dir), *options]
        return self._run([*command, "--", python, str(script)], env)

    def otel_instrument(self, source: str, **env: str) -> subprocess.CompletedProcess:
        script = self.script(source)
        env = {
            E.OTEL_TRACES_EXPORTER_ENV: "tracerl",
            E.DATA_DIR_ENV: str(self.data_dir),
            E.OTEL_METRICS_EXPORTER_ENV: "none",
            E.OTEL_LOGS_EXPORTER_ENV: "none",
            **env,
        }
        instrument = Path(sys.executable).parent / "opentelemetry-instrument"
        return self._run([str(instrument), sys.executable, str(script)], env)

    def _run(self, command: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
        done = subprocess.run(command, env=self.env(**env), cwd=self.tmp_path, capture_output=True, text=True, timeout=120)
        self.stdout, self.stderr = done.stdout, done.stderr
        return done

    def rows(self) -> list[dict]:
        return span_rows(self.data_dir)

    def build(self, episode_id: str, reward: float = 1.0, **options) -> tuple[list[dict], dict]:
        """Grade the episode late (a rewards row, as an external grader would) and build the training dataset with
        the real pipeline (``options``: ``build_dataset``'s): its transitions in step order, and the manifest."""
        import time

        import pyarrow as pa

        from tracerl.core.storage import write_parquet_atomic
        from tracerl.pipeline import build_dataset
        from tracerl.schemas import REWARDS_SCHEMA

        grade = {"episode_id": episode_id, "name": "grade", "value": reward, "time_unix_nano": time.time_ns()}
        write_parquet_atomic(pa.Table.from_pylist([grade], schema=REWARDS_SCHEMA), self.data_dir / "rewards", prefix="rewards")
        out = self.tmp_path / "dataset"
        manifest = build_dataset(self.data_dir, out, **options)
        if not list(out.glob(A.DATASET_FILES_GLOB)):
            return [], manifest
        rel = duckdb.sql(f"select * from read_parquet('{out}/{A.DATASET_FILES_GLOB}') order by step")
        return [dict(zip(rel.columns, row)) for row in rel.fetchall()], manifest

    def llm_calls(self) -> list[dict]:
        """Rows of the LLM-call spans (those that carry a request model), in start order."""
        return [r for r in self.rows() if r["request_model"] is not None]


@pytest.fixture()
def captured(tmp_path: Path, server: ScriptedServer) -> Captured:
    return Captured(tmp_path, server.base_url)


# ---- the tool round trip a model is taught (the same for every API: its system prompt is the Responses API's instructions)
SYSTEM = "Use the add tool."
QUESTION = "task: add 3 4"
CALL = {"name": "add", "arguments": {"a": 3, "b": 4}}
TOOL_REPLY = "<tool_call>" + json.dumps(CALL) + "</tool_call>"
ANSWER = "answer: 7"


def check_span(span, truth: dict) -> None:
    """An LLM-call span carries exactly what the server sampled (``truth``: the served call's record)."""
    assert decode(span.attributes[A.PROMPT_TOKEN_IDS]) == truth["prompt"]
    assert decode(span.attributes[A.COMPLETION_TOKEN_IDS]) == truth["completion"]
    assert decode(span.attributes[A.COMPLETION_LOGPROBS]) == pytest.approx(truth["logprobs"], abs=1e-4)
    assert span.attributes[A.POLICY_VERSION] == truth["version"] == 0
    assert span.attributes[A.GEN_AI_RESPONSE_ID] == truth["id"]
    assert A.TOKEN_IDS_MISSING not in span.attributes


def texts(messages_json: str) -> list[tuple[str, str]]:
    """A transition's messages as (role, text) pairs."""
    return [(m["role"], "".join(p.get("content", "") for p in m["parts"])) for m in json.loads(messages_json)]


def teach(base: Path, out: Path, pairs: list[tuple[list[dict], str]]) -> Path:
    """The tiny model after enough gradient steps to answer each prompt (chat messages) with its reply, greedily."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base)
    batch = []
    for messages, reply in pairs:
        prompt = template_prompt_ids(tokenizer, messages)
        target = tokenizer(reply, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        batch.append((prompt + target, [-100] * len(prompt) + target))
    width = max(len(ids) for ids, _ in batch)
    ids = torch.tensor([i + [tokenizer.pad_token_id] * (width - len(i)) for i, _ in batch])
    labels = torch.tensor([lab + [-100] * (width - len(lab)) for _, lab in batch])
    mask = torch.tensor([[1] * len(i) + [0] * (width - len(i)) for i, _ in batch])
    torch.manual_seed(0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny kernels: a second thread only spins on a busy machine
    try:
        for _ in range(800):
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if loss.item() < 2e-4:
                break
    finally:
        torch.set_num_threads(threads)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def tool_model(tmp_path_factory) -> Path:
    """A tiny model that calls ``add`` for QUESTION under SYSTEM, then answers ANSWER: taught once, served by each API's
    ``tool_server`` (each records its own API's replies)."""
    require_module("tracerl.trainer.serving.app", "pip install torch==2.13.0 && pip install -e '.[train]'")
    from tracerl.trainer.tiny_model import ensure_tiny_model

    asked = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]
    called = [*asked, {"role": "assistant", "content": TOOL_REPLY}, {"role": "tool", "content": "7"}]
    return teach(ensure_tiny_model(), tmp_path_factory.mktemp("tool-model"), [(asked, TOOL_REPLY), (called, ANSWER)])
