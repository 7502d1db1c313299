"""What the training loop hands an agent program, read in the agent's own process.

An agent trained by the loop (``tracerl demo``, ``python -m examples.X.train``) calls the
policy endpoint under a model name it must know, and may keep data it builds once (databases,
search indexes) in tracerl's cache folder. Those names live here, beside the episode API and
not with the loop (:mod:`tracerl.orchestration.local`), because an agent runs on the capture
install alone (``pip install tracerl``): importing the loop's modules to learn a model name
loaded the pipeline and DuckDB into every agent process. This module imports nothing but
:mod:`tracerl.schemas.environment`; the loop, the trainer and the agents all take these names
from it.
"""

from __future__ import annotations

import os
from pathlib import Path

from tracerl.schemas import environment as E

POLICY_MODEL_NAME = "policy"  # the model name agents send; the loop serves the policy (`vllm serve`, `tracerl serve`) under it


def agent_model(agent: str, default: str = POLICY_MODEL_NAME) -> str:
    """The model name ``agent`` should call: its policy's, when the loop trains a policy per agent, else ``default``.

    The one thing an agent program changes to take part in a per-agent training: the model
    string it gives each of its agents, which every framework lets it set. The loop passes the
    mapping in ``TRACERL_AGENT_MODELS`` (``writer=writer,checker=checker``).
    """
    pairs = (pair.partition("=") for pair in os.environ.get(E.AGENT_MODELS_ENV, "").split(",") if pair)
    return {name.strip(): model.strip() for name, _, model in pairs}.get(agent, default)


def cache_dir() -> Path:
    """tracerl's cache folder (``TRACERL_CACHE_DIR``, default ``~/.cache/tracerl``).

    One folder for what is built once and reused: tiny models, converted GGUFs, starting
    policies, and an example agent's own data (the SQL databases, the RAG corpus index), which
    is why it is read here, where an agent's process can read it without the trainer.
    """
    return Path(os.environ.get(E.CACHE_DIR_ENV) or Path.home() / ".cache" / "tracerl")
