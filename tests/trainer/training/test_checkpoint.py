"""Checkpoints appear whole or not at all, replacing the previous one in one step."""

from __future__ import annotations

import pytest

from tracerl.trainer.training.checkpoint import checkpoint_folder


def test_a_checkpoint_replaces_the_previous_one_whole(tmp_path):
    out = tmp_path / "policy" / "current"
    with checkpoint_folder(out) as folder:
        (folder / "config.json").write_text("{}")
        (folder / "old-only.bin").write_bytes(b"1")
    with checkpoint_folder(out) as folder:
        assert folder != out and not any(folder.iterdir())
        (folder / "config.json").write_text('{"v": 2}')
    assert sorted(p.name for p in out.iterdir()) == ["config.json"]
    assert (out / "config.json").read_text() == '{"v": 2}'
    assert [p.name for p in out.parent.iterdir()] == ["current"]  # no temporary folder left


def test_a_failed_write_leaves_the_previous_checkpoint_untouched(tmp_path):
    out = tmp_path / "current"
    with checkpoint_folder(out) as folder:
        (folder / "config.json").write_text('{"v": 1}')
    with pytest.raises(RuntimeError, match="disk full"):
        with checkpoint_folder(out) as folder:
            (folder / "config.json").write_text('{"v": 2, "trunc')
            raise RuntimeError("disk full")
    assert (out / "config.json").read_text() == '{"v": 1}'
    assert [p.name for p in tmp_path.iterdir()] == ["current"]
