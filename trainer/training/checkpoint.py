"""Checkpoints appear whole or not at all.

A policy server told to load a checkpoint (``tracerl.trainer.publish``) must never read
half of one, and a job killed while saving must leave the previous checkpoint usable.
So a checkpoint is written into a hidden folder beside its place, made durable, and
renamed into place in one step.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tracerl.storage import fsync_dir, fsync_file


@contextmanager
def checkpoint_folder(out_dir: str | os.PathLike) -> Iterator[Path]:
    """Yield an empty folder to write a checkpoint into; on success it becomes ``out_dir``.

    An existing ``out_dir`` is replaced whole. If the block raises, nothing changes.
    """
    out = Path(out_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        yield tmp
        for path in tmp.rglob("*"):
            if path.is_file():
                fsync_file(path)
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        if out.exists():
            os.replace(out, old)
        os.replace(tmp, out)
        fsync_dir(out.parent)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
