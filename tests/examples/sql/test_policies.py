"""The SQL agent with a policy per agent group: writer and rewriter one LoRA adapter, the checker another,
both served by one vLLM (CPU build) on a model of a real architecture, trained round after round.

Random weights earn no reward, so what is shown is the plumbing a GPU user relies on: each node
calls its policy's adapter by name, each call is captured with the adapter and the version
that served it, each policy trains on its own calls only, each adapter's versions advance on
their own (a publish that fails holds one policy back and not the other), and the registry of
each is there for `tracerl policy list`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from examples.sql.recipe import RECIPE
from tracerl.orchestration.local.config import LocalConfig
from tracerl.orchestration.local.run import run_local
from tracerl.trainer.training.config import TrainConfig

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[3]
POLICIES = ["--policy", "writer=writer,rewriter", "--policy", "checker=checker"]
SMALL = ["--rounds", "2", "--tasks-per-round", "2", "--group-size", "2", "--eval-tasks", "2", "--max-tokens", "16"]


def served_by(round_dir: Path) -> dict[tuple[str, str], list[int]]:
    """(agent, policy that served it) -> the policy versions of the round's training rows."""
    query = f"""SELECT agent_name, policy_name, list(DISTINCT policy_version ORDER BY policy_version)
                FROM read_parquet('{round_dir}/dataset/*.parquet') GROUP BY ALL"""
    return {(agent, policy): versions for agent, policy, versions in duckdb.sql(query).fetchall()}


def policy_list(state: Path, *options: str) -> list[list[str]]:
    done = subprocess.run([sys.executable, "-m", "tracerl", "policy", "list", "--state", str(state), *options],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return [line.split() for line in done.stdout.splitlines()[1:]]


def test_two_policies_train_on_their_own_calls_and_are_served_by_one_vllm(qwen2_folder, vllm_python, tmp_path):
    out = tmp_path / "run"
    command = [sys.executable, "-m", "examples.sql.train", "--model", str(qwen2_folder), "--server", "vllm", "--backend", "openrlhf",
               "--lora-rank", "8", *POLICIES, *SMALL, "--out", str(out)]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    for rnd, row in enumerate(rows):
        assert {name: p["policy_version"] for name, p in row["policies"].items()} == {"writer": rnd, "checker": rnd}  # what sampled the round
        assert row["wrong_policy_calls"] == 0
        # each node called its policy's adapter, answered with that adapter's version of the round
        routes = served_by(out / "rounds" / f"{rnd:03d}")
        assert set(routes) <= {("writer", "writer"), ("rewriter", "writer"), ("checker", "checker")}
        assert {("writer", "writer"), ("checker", "checker")} <= set(routes) and all(v == [rnd] for v in routes.values())
    for row in rows[:2]:
        for p in row["policies"].values():
            assert p["status"] == "trained" and p["version"] == p["policy_version"] + 1
            assert p["served_logprob_gap"] < 1e-4 and p["checkpoint_bytes"] > 0
    listed = policy_list(out / "policy")
    assert [(line[0], line[1], line[2]) for line in listed] == [
        ("checker", "0", "base"), ("checker", "1", "trained"), ("checker", "2", "trained"),
        ("writer", "0", "base"), ("writer", "1", "trained"), ("writer", "2", "trained"),
    ]
    assert [line[1] for line in policy_list(out / "policy", "--policy", "writer")] == ["0", "1", "2"]


def test_an_adapter_vllm_refuses_holds_its_policy_back_and_the_other_goes_on(qwen2_folder, vllm_python, tmp_path):
    out = tmp_path / "run"
    cfg = LocalConfig(
        out=out, rounds=2, tasks_per_round=2, group_size=2, eval_tasks=2, max_tokens=16, model=str(qwen2_folder), server="vllm",
        policies={"writer": ("writer", "rewriter"), "checker": ("checker",)}, train=TrainConfig(lora_rank=8, learning_rate=1e-5),
    )

    def widen_the_first_checker_adapter(rnd: int, text: str) -> None:
        if (rnd, text) == (0, "publishing checker v1"):  # wider than vLLM's --max-lora-rank: refused at load
            config = out / "policy" / "checker" / "v1" / "adapter_config.json"
            config.write_text(json.dumps({**json.loads(config.read_text()), "r": 64}))

    rows = run_local(RECIPE, cfg, on_phase=widen_the_first_checker_adapter)
    first = rows[0]["policies"]
    assert first["writer"]["status"] == "trained" and first["writer"]["version"] == 1
    assert first["checker"]["status"] == "publish_failed" and "version" not in first["checker"]
    assert "did not load" in first["checker"]["reason"] and (out / "policy" / "checker" / "failed" / "v1-round0").is_dir()
    second = rows[1]["policies"]
    assert (second["writer"]["policy_version"], second["checker"]["policy_version"]) == (1, 0)  # what sampled round 1
    assert (second["writer"]["version"], second["checker"]["version"]) == (2, 1)
    # round 1's calls: the writer's adapter at version 1, the checker's still at 0 (what vLLM kept serving)
    routes = served_by(out / "rounds" / "001")
    assert routes[("writer", "writer")] == [1] and routes[("checker", "checker")] == [0]
    assert served_by(out / "rounds" / "002")[("checker", "checker")] == [1]
    assert [line[1] for line in policy_list(out / "policy", "--policy", "checker")] == ["0", "1"]
