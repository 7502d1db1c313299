"""The policy registry: versions in one shape whoever made them, and the rounds set aside because every row was too stale."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracerl.orchestration.registry import PolicyRegistry, RegistryError, VersionEntry


def test_a_skipped_rounds_files_are_claimed_without_making_a_version(tmp_path):
    registry = PolicyRegistry(tmp_path)
    registry.append(VersionEntry(0, "base", None, "base", recorded_at="t0"))
    record = registry.record_skip(1, ["transitions-a.parquet"], 3, "every row is more than 2 policy versions old")
    assert list(record) == ["round", "files", "episodes", "reason", "at"] and registry.skipped() == [record]
    assert registry.latest()["version"] == 0 and registry.claimed_files() == {"transitions-a.parquet"}
    registry.append(VersionEntry(1, "trained", 0, "v1", dataset={"files": ["transitions-b.parquet"]}, recorded_at="t2"))
    assert registry.claimed_files() == {"transitions-a.parquet", "transitions-b.parquet"} and len(registry.skipped()) == 1


def test_the_claimed_files_come_from_one_read_of_the_registry(tmp_path, monkeypatch):
    # a round asks once and tests each of its dataset's files against the answer, however many versions there are
    registry = PolicyRegistry(tmp_path)
    registry.append(VersionEntry(0, "base", None, "base"))
    for version in range(1, 20):
        registry.append(VersionEntry(version, "trained", version - 1, f"v{version}", dataset={"files": [f"transitions-{version}.parquet"]}))
    registry.record_skip(20, ["transitions-20.parquet"], 1, "too stale")
    reads = []
    read_text = Path.read_text
    monkeypatch.setattr(Path, "read_text", lambda path, *a, **k: reads.append(path) or read_text(path, *a, **k))
    assert registry.claimed_files() == {f"transitions-{n}.parquet" for n in range(1, 21)}
    assert reads == [registry.path]


@pytest.mark.parametrize("question", ["entries", "skipped", "claimed_files"])
def test_a_file_that_is_not_a_registry_is_named_whichever_question_is_asked(tmp_path, question):
    registry = PolicyRegistry(tmp_path)
    registry.path.write_text('{"skipped": []}')
    with pytest.raises(RegistryError, match="registry.json is not a policy registry .*restore it from a backup"):
        getattr(registry, question)()


def test_every_kind_of_version_is_written_in_one_shape_and_numbers_must_follow(tmp_path):
    registry = PolicyRegistry(tmp_path)
    base = registry.append(VersionEntry(0, "base", None, "base", recorded_at="t0"))
    assert base == {"version": 0, "kind": "base", "parent": None, "checkpoint": "base", "published": [], "recorded_at": "t0"}
    # a trained version: the local loop's and a scheduled round's (round_record.trained_entry) have a dataset, size and phases
    loop = registry.append(VersionEntry(1, "trained", 0, "v1", episodes=[{"episode_id": "e", "policy_versions": [0]}], metrics={"loss": 0.1},
                                        dataset={"files": []}, checkpoint_bytes=10, seconds={"rollout": 1.0, "train": 1.0}))
    assert list(loop) == ["version", "kind", "parent", "checkpoint", "episodes", "metrics", "skipped", "dataset", "checkpoint_bytes", "seconds",
                          "published", "recorded_at"]
    # a scheduled round with an eval command: the same fields, and its gate
    scheduled = registry.append(VersionEntry(2, "trained", 1, "v2", dataset={"files": []}, checkpoint_bytes=10, seconds={"train": 1.0},
                                             eval_reward=0.5, gate={"held": False}))
    assert set(scheduled) == set(loop) | {"eval_reward", "gate"}
    assert registry.entries() == [base, loop, scheduled]
    with pytest.raises(RegistryError, match="version 4 does not follow 2"):
        registry.append(VersionEntry(4, "rollback", 1, "v4"))


def test_a_write_killed_before_its_rename_keeps_the_registry_and_the_next_round_removes_what_it_left(tmp_path, monkeypatch):
    from tracerl.core.storage import temporary_name
    from tracerl.orchestration.rounds.round import StateFolder
    from tracerl.trainer.training.checkpoint import CHECKPOINT_MANIFEST_FILE

    registry = PolicyRegistry(tmp_path)
    registry.append(VersionEntry(0, "base", None, "base", recorded_at="t0"))
    with monkeypatch.context() as patch:
        patch.setattr("os.unlink", lambda path: None)  # as if killed: the temporary file stays
        patch.setattr("os.replace", lambda *_: (_ for _ in ()).throw(OSError("killed")))
        with pytest.raises(OSError, match="killed"):
            registry.append(VersionEntry(1, "trained", 0, "v1", recorded_at="t1"))
    assert [e["version"] for e in registry.entries()] == [0]
    (left,) = [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert left.startswith(".registry.json.")
    checkpoint = tmp_path / "policies" / "v0001"
    checkpoint.mkdir(parents=True)
    (checkpoint / temporary_name(CHECKPOINT_MANIFEST_FILE)).write_text("{")
    (tmp_path / temporary_name("metrics.jsonl")).write_text("")
    (tmp_path / ".notes.tmp").write_text("someone else's")  # not a name a round writes: left alone
    StateFolder(tmp_path).remove_partials()
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == [".notes.tmp", "registry.json"]
