"""Never two rounds at once, and never a lock that a dead job holds.

The lock is ``fcntl.flock`` on ``STATE/lock``: the kernel releases it when the process
holding it exits, however it exits (``kill -9``, OOM killer, a node's reboot of the
container), so there is no stale lock file to clean up and no timeout to guess. The file
keeps the holder's pid for the message of a job that finds the lock taken.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class RoundLocked(RuntimeError):
    """Another round (or policy rollback) on the same state folder is running."""


@contextmanager
def round_lock(state: Path) -> Iterator[None]:
    """Hold the state folder's lock for the block; raise :class:`RoundLocked` at once if another process has it."""
    state.mkdir(parents=True, exist_ok=True)
    path = state / "lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            raise RoundLocked(f"another round holds {path} (pid {holder}); it is released when that process ends") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # closing the last descriptor releases the lock
