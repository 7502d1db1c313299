"""``kill -9`` at random points of ``tracerl train run``, again and again: the ledger stays exact.

Real processes against a real ``tracerl serve``, on the tiny model. Each attempt kills the
round at a random moment after one of its phases began (the phases are taken in turn, so
every one is hit), with new episodes arriving between attempts. Then rounds run until there
is nothing left to do, and the registry must show every captured episode trained by exactly
one version, the versions a chain, each checkpoint the one its version was published as.
"""

from __future__ import annotations

import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import httpx
import pytest

from tracerl.pipeline.build_output import transition_files
from tracerl.orchestration.registry import PolicyRegistry
from tracerl.trainer.serving.app import running_server
from tracerl.trainer.training.checkpoint import read_checkpoint_manifest

KILLED_IN = ("build", "train", "checkpoint", "publish", "record")


def run_and_kill(command: list[str], cwd, phase: str, delay_s: float) -> bool:
    """Start a round, kill it ``delay_s`` after ``phase`` begins; False if it ended before that."""
    process = subprocess.Popen(command, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        for line in process.stderr:
            if line.strip() == f"tracerl round: {phase}":
                try:
                    process.wait(timeout=delay_s)
                except subprocess.TimeoutExpired:
                    process.kill()  # SIGKILL
                break
        process.wait(timeout=300)
        return process.returncode == -9
    finally:
        process.kill()
        process.wait()


@pytest.mark.slow
def test_kill_9_at_random_points_never_trains_an_episode_twice_nor_skips_one(tmp_path, capture, round_config, tracerl, tiny_checkpoint):
    rng = random.Random(20261123)
    written: list[str] = []
    kills: Counter = Counter()
    with running_server(tiny_checkpoint) as server:
        config = round_config(endpoint=server.base_url)
        command = [sys.executable, "-m", "tracerl", "train", "run", "--config", str(config)]
        attempts = 0
        while sum(kills.values()) < 20:
            attempts += 1
            assert attempts < 60, f"only {dict(kills)} kills landed in {attempts} attempts"
            written += capture(rng.choice([1, 2, 3]))
            phase = KILLED_IN[sum(kills.values()) % len(KILLED_IN)]
            delay = rng.choice([0.0, rng.uniform(0, 0.05), rng.uniform(0, 1.0)])
            if run_and_kill(command, tmp_path, phase, delay):
                kills[phase] += 1
        for _ in range(5):  # finish what the last kill left, then train on what is left
            done = tracerl("train", "run", "--config", str(config))
            assert done.returncode == 0, done.stderr
            if done.summary["status"] == "idle":
                break
        assert done.summary["status"] == "idle" and done.summary["episodes"] == 0
        served = httpx.get(f"{server.url}/health").json()["policy_version"]

    assert set(kills) == set(KILLED_IN), kills
    entries = PolicyRegistry(tmp_path / "state").entries()
    assert [e["version"] for e in entries] == list(range(len(entries)))
    assert entries[0]["kind"] == "base" and all(e["kind"] == "trained" for e in entries[1:])
    trained = [e["episode_id"] for e in entries for e in e.get("episodes", [])]
    assert sorted(trained) == sorted(written)  # each captured episode trained exactly once
    claimed = [name for e in entries for name in (e.get("dataset") or {}).get("files", [])]
    assert sorted(claimed) == sorted(f.name for f in transition_files(tmp_path / "state" / "dataset"))
    for parent, entry in zip(entries, entries[1:]):
        manifest = read_checkpoint_manifest(entry["checkpoint"])
        assert manifest["policy_version"] == entry["version"] and manifest["parent"] == str(Path(parent["checkpoint"]).resolve())
        assert manifest["dataset"]["path"] == entry["dataset"]["path"]
        assert [p["policy_version"] for p in entry["published"]] == [entry["version"]]
    assert served == entries[-1]["version"]
    assert not [p for p in (tmp_path / "state").rglob(".*") if p.name != ".manifest.json"]  # no half-written leftovers

