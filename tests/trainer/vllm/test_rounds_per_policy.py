"""Scheduled rounds (`tracerl train run`) with a policy per agent group, publishing LoRA adapters to one real vLLM.

The spans are written as an agent's exporter writes them: each call with the agent that made
it, the adapter that answered it (``gen_ai.response.model``) and that adapter's version.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tracerl.trainer.publish import VllmReload, publish
from tracerl_testing.span_builders import episode_span, llm_call, reward_span, write_spans

from .conftest import LORA_RANK, greedy_chat

pytestmark = pytest.mark.slow
PROMPT = "task: add 3 4"


def episodes(ids: range, checker_served_by: str = "checker") -> list[dict]:
    """Writer then checker per episode, two tasks, rewards differing within each task."""
    rows = []
    for i in ids:
        ep = f"ep-{i:03d}"
        rows += [
            episode_span(ep, 0, 100, task=f"task-{i % 2}"),
            llm_call(ep, "w", 1, 10, [5, 6, 7], [8, 9], agent="writer", model="writer", version=0),
            llm_call(ep, "c", 11, 20, [5, 6, 7, 8, 9], [10], agent="checker", model=checker_served_by, version=0),
            reward_span(ep, "r", 30, float(i % 4 < 2)),
        ]
    return rows


def tracerl(cwd: Path, *args: str) -> tuple[int, dict | list[str]]:
    done = subprocess.run([sys.executable, "-m", "tracerl", *args], capture_output=True, text=True, timeout=600, cwd=cwd,
                          env={**os.environ, "COLUMNS": "400"})
    lines = done.stdout.strip().splitlines()
    assert lines, done.stderr[-3000:]
    try:
        return done.returncode, json.loads(lines[-1])
    except ValueError:
        return done.returncode, lines


def test_each_policy_trains_publishes_and_rolls_back_on_its_own(vllm, start_model, data_dir, tmp_path):
    publish(start_model, VllmReload(vllm.base_url), version=0)  # the base model the adapters apply to
    state = tmp_path / "state"
    run = ["train", "run", "--spans", str(data_dir), "--state", str(state), "--model", str(start_model), "--min-episodes", "1",
           "--policy", "writer=writer", "--policy", "checker=checker", "--lora-rank", str(LORA_RANK),
           "--endpoint", vllm.base_url, "--endpoint-kind", "vllm-lora", "--epochs", "1", "--minibatch-size", "8"]

    write_spans(data_dir, episodes(range(8)))
    code, summary = tracerl(tmp_path, *run)
    assert code == 0 and summary["status"] == "trained", summary
    assert {name: (p["status"], p["version"], p["episodes"], p["transitions"]) for name, p in summary["policies"].items()} == {
        "writer": ("trained", 1, 8, 8), "checker": ("trained", 1, 8, 8)}
    assert (greedy_chat(vllm.base_url, PROMPT, model="writer")["version"], greedy_chat(vllm.base_url, PROMPT, model="checker")["version"]) == ("1", "1")

    # new episodes whose checker calls the writer's adapter answered: the writer trains, the checker has nothing of its own
    write_spans(data_dir, episodes(range(8, 12), checker_served_by="writer"))
    code, summary = tracerl(tmp_path, *run)
    assert code == 0 and summary["status"] == "trained"
    assert summary["policies"]["writer"]["version"] == 2 and summary["policies"]["checker"]["status"] == "idle"
    manifest = json.loads((state / "dataset" / ".manifest.json").read_text())
    assert manifest["counts"]["llm_calls"]["wrong_policy"] == {"checker -> writer": 4}

    # rolling the writer back leaves the checker as it is
    code, entry = tracerl(tmp_path, "policy", "rollback", "1", "--state", str(state), "--policy", "writer",
                          "--endpoint", vllm.base_url, "--endpoint-kind", "vllm-lora")
    assert code == 0 and (entry["status"], entry["version"], entry["parent"]) == ("rolled_back", 3, 1)
    assert (greedy_chat(vllm.base_url, PROMPT, model="writer")["version"], greedy_chat(vllm.base_url, PROMPT, model="checker")["version"]) == ("3", "1")

    code, lines = tracerl(tmp_path, "policy", "list", "--state", str(state))
    assert [(line.split()[0], line.split()[1], line.split()[2]) for line in lines[1:]] == [
        ("checker", "0", "base"), ("checker", "1", "trained"),
        ("writer", "0", "base"), ("writer", "1", "trained"), ("writer", "2", "trained"), ("writer", "3", "rollback")]
    done = subprocess.run([sys.executable, "-m", "tracerl", "policy", "show", "1", "--state", str(state)], capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "400"})
    assert done.returncode == 2 and "holds several policies (checker, writer): add --policy NAME" in done.stderr


def test_a_policy_config_that_cannot_be_served_is_refused_at_start(start_model, data_dir, tmp_path):
    base = ["train", "run", "--spans", str(data_dir), "--state", str(tmp_path / "state"), "--model", str(start_model)]
    code, summary = tracerl(tmp_path, *base, "--policy", "writer=writer", "--policy", "checker=writer", "--lora-rank", "8")
    assert code == 2 and "agent 'writer' is claimed by two policies" in summary["reason"]
    code, summary = tracerl(tmp_path, *base, "--policy", "writer=writer")
    assert code == 2 and "set [train] lora_rank" in summary["reason"]
    code, summary = tracerl(tmp_path, *base, "--policy", "writer=writer", "--lora-rank", "8", "--endpoint", "http://127.0.0.1:1/v1")
    assert code == 2 and 'need kind = "vllm-lora"' in summary["reason"]
