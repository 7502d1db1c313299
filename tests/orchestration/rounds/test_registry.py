"""The policy registry: versions, and the rounds set aside because every row was too stale."""

from __future__ import annotations


def test_a_skipped_rounds_files_are_claimed_without_making_a_version(tmp_path):
    from tracerl.orchestration.rounds.registry import PolicyRegistry

    registry = PolicyRegistry(tmp_path)
    registry.append({"version": 0, "kind": "base", "parent": None, "checkpoint": "base", "published": [], "recorded_at": "t0"})
    registry.record_skip({"round": 1, "files": ["transitions-a.parquet"], "reason": "every row is more than 2 policy versions old", "at": "t1"})
    assert registry.latest()["version"] == 0 and registry.claimed_files() == {"transitions-a.parquet"}
    registry.append({"version": 1, "kind": "trained", "parent": 0, "checkpoint": "v1", "dataset": {"files": ["transitions-b.parquet"]}, "recorded_at": "t2"})
    assert registry.claimed_files() == {"transitions-a.parquet", "transitions-b.parquet"} and len(registry.skipped()) == 1
