"""The one path both round drivers take once they have samples: the trainer they hold -> a checkpoint with its
manifest -> its registry entry -> release; and the metrics row derived from that entry, of one type for both.

The local loop trains the trainer it keeps warm across rounds; a scheduled round loads a fresh one from the
parent checkpoint (``train_checkpoint``, what ``tracerl train`` runs). Both here, on one dataset, against a
real ``tracerl serve``.
"""

from __future__ import annotations

import pytest

from tracerl.orchestration.phases import PhaseClock
from tracerl.orchestration.registry import PolicyRegistry, VersionEntry
from tracerl.orchestration.release import release
from tracerl.orchestration.round_record import checkpoint_bytes, metrics_row, skip_row, trained_entry
from tracerl.pipeline import build_dataset
from tracerl.schemas.dataset_folder import DatasetFolder
from tracerl.trainer.publish import BuiltinServer
from tracerl.trainer.serving.app import running_server
from tracerl.trainer.training.backends import load_trainer
from tracerl.trainer.training.checkpoint import CHECKPOINT_MANIFEST_FILE
from tracerl.trainer.training.config import TrainConfig
from tracerl.trainer.training.dataset import read_dataset
from tracerl.trainer.training.run import train_and_save, train_checkpoint
from tracerl_testing.span_builders import chat_episode, write_spans

CONFIG = TrainConfig(epochs=1, minibatch_size=8)


def test_a_warm_trainer_and_a_fresh_one_record_their_versions_alike_and_give_rows_of_one_type(tmp_path, data_dir, tiny_checkpoint):
    write_spans(data_dir, [row for i in range(4) for row in chat_episode(f"ep-{i}", task=f"task-{i % 2}", reward=float(i % 2))])
    build_dataset(data_dir, tmp_path / "dataset")
    dataset = DatasetFolder(tmp_path / "dataset")
    registry = PolicyRegistry(tmp_path / "state")
    registry.append(VersionEntry(0, "base", None, str(tiny_checkpoint)))
    with running_server(tiny_checkpoint) as server:
        target = BuiltinServer(server.base_url)

        loop_clock = PhaseClock()  # the local loop's way: the trainer it holds
        trainer = load_trainer("torch", tiny_checkpoint, CONFIG)
        samples, skipped = read_dataset(dataset.path)
        with loop_clock("train"):
            warm = train_and_save(trainer, samples, skipped, dataset=dataset.path, parent=tiny_checkpoint, parent_version=0,
                                  out=tmp_path / "v1", backend="torch", version=1, on_saving=lambda: loop_clock.mark("checkpoint"))
        loop_entry = release(registry, trained_entry(warm.checkpoint, 1, 0, dataset, None, seconds=loop_clock.seconds), [target], clock=loop_clock)

        round_clock = PhaseClock()  # a scheduled round's: a trainer loaded from the parent checkpoint
        with round_clock("train"):
            fresh = train_checkpoint(dataset.path, warm.checkpoint, tmp_path / "v2", config=CONFIG, version=2,
                                     on_saving=lambda: round_clock.mark("checkpoint"))
        round_entry = release(registry, trained_entry(fresh.checkpoint, 2, 1, dataset, None, seconds=round_clock.seconds), [target],
                              clock=round_clock)

    assert set(warm.manifest) == set(fresh.manifest) and fresh.manifest["parent_version"] == 1  # read from the warm one's manifest
    assert set(loop_entry) == set(round_entry) and [e["version"] for e in registry.entries()] == [0, 1, 2]
    loop_row, round_row = metrics_row(loop_entry), metrics_row(round_entry)
    assert list(loop_row) == list(round_row)  # the same fields, in the same order
    assert [(r["policy_version"], r["version"], r["status"], r["episodes"]) for r in (loop_row, round_row)] == [(0, 1, "trained", 4), (1, 2, "trained", 4)]
    assert loop_row["loss"] == warm.metrics.loss and loop_row["trained_tokens"] > loop_row["tokens"] > 0
    assert loop_row["checkpoint_bytes"] == checkpoint_bytes(warm.checkpoint) < checkpoint_bytes(warm.checkpoint) + (
        warm.checkpoint / CHECKPOINT_MANIFEST_FILE).stat().st_size  # its manifest (paths, timings) left out
    # time from the one clock: the trainer's own timer is not a row field
    assert set(loop_row) >= {"train_seconds", "checkpoint_seconds", "publish_seconds"} and "record_seconds" not in loop_row  # recorded before
    assert loop_row["seconds"] == pytest.approx(loop_row["train_seconds"] + loop_row["checkpoint_seconds"] + loop_row["publish_seconds"], abs=0.01)

    record = registry.record_skip(3, [], 4, "every sample has advantage 0")  # a round with nothing to train on, either driver
    assert skip_row(record) == {"status": "skipped", "episodes": 4, "reason": "every sample has advantage 0"}
