"""What the training loop hands an agent program (``tracerl.instrumentation.agent_env``), read as the agent reads it."""

from __future__ import annotations

from pathlib import Path

import tracerl
from tracerl.instrumentation import agent_env
from tracerl.schemas import environment as E


def test_each_agent_calls_its_policy_and_the_rest_the_default(monkeypatch):
    monkeypatch.setenv(E.AGENT_MODELS_ENV, "writer=writer, rewriter = writer,checker=checker")
    assert [agent_env.agent_model(a) for a in ("writer", "rewriter", "checker")] == ["writer", "writer", "checker"]
    assert agent_env.agent_model("planner") == agent_env.POLICY_MODEL_NAME == "policy"
    assert agent_env.agent_model("planner", "my-model") == "my-model"
    monkeypatch.delenv(E.AGENT_MODELS_ENV)
    assert agent_env.agent_model("writer") == "policy"


def test_the_cache_folder_follows_its_variable(monkeypatch, tmp_path):
    monkeypatch.setenv(E.CACHE_DIR_ENV, str(tmp_path))
    assert agent_env.cache_dir() == tmp_path
    monkeypatch.delenv(E.CACHE_DIR_ENV)
    assert agent_env.cache_dir() == Path.home() / ".cache" / "tracerl"


def test_an_agent_reaches_them_as_tracerl_names():
    assert (tracerl.agent_model, tracerl.POLICY_MODEL_NAME) == (agent_env.agent_model, agent_env.POLICY_MODEL_NAME)
