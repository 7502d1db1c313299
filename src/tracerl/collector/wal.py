"""Write-ahead log: numbered segment files of length-prefixed, checksummed records.

A request is acknowledged only after its record is on disk (``fdatasync``); many records
share one sync (group commit), so durability costs one disk flush per group, not per
request. A segment is closed with a *commit record* naming the Parquet partition its rows
go to; once that Parquet file exists the segment is deleted. After a crash,
:func:`read_segment` returns every complete record and drops a torn tail (a record that
was never acknowledged, since its sync had not returned).
"""

from __future__ import annotations

import fcntl
import os
import struct
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from tracerl.core.storage import fsync_dir

_HEADER = struct.Struct("<IIB")  # payload length, crc32(kind + payload), kind
DATA = 1
COMMIT = 2


@dataclass
class Segment:
    """What a segment file holds: its data records and, if closed, the target partition."""

    seq: int
    path: Path
    records: list[bytes] = field(default_factory=list)
    partition: str | None = None


def segment_path(folder: Path, seq: int) -> Path:
    return folder / f"{seq:012d}.wal"


def list_segments(folder: Path) -> list[int]:
    return sorted(int(p.stem) for p in folder.glob("*.wal") if p.stem.isdigit())


def read_segment(folder: Path, seq: int) -> Segment:
    """Complete records of a segment; a torn or corrupt tail is cut off (and truncated)."""
    path = segment_path(folder, seq)
    data = path.read_bytes()
    segment = Segment(seq, path)
    offset = 0
    while offset + _HEADER.size <= len(data):
        length, crc, kind = _HEADER.unpack_from(data, offset)
        start, end = offset + _HEADER.size, offset + _HEADER.size + length
        payload = data[start:end]
        if end > len(data) or zlib.crc32(payload, kind) != crc:
            break
        if kind == DATA:
            segment.records.append(payload)
        elif kind == COMMIT:
            segment.partition = payload.decode()
        offset = end
    if offset < len(data):
        with open(path, "r+b") as handle:
            handle.truncate(offset)
            os.fsync(handle.fileno())
    return segment


def _header(kind: int, payload: bytes) -> bytes:
    return _HEADER.pack(len(payload), zlib.crc32(payload, kind), kind)


def _frame(kind: int, payload: bytes) -> bytes:
    return _header(kind, payload) + payload


_IOV_MAX = min(os.sysconf("SC_IOV_MAX"), 1024)


def _write_all(fd: int, parts: list[bytes]) -> None:
    """Write ``parts`` in order with ``writev`` (no copy into one buffer: a group of requests is
    tens of MB), however partially each call writes."""
    views = [memoryview(p) for p in parts if p]
    first = 0
    while first < len(views):
        written = os.writev(fd, views[first : first + _IOV_MAX])
        while written:
            if written >= len(views[first]):
                written -= len(views[first])
                first += 1
            else:
                views[first] = views[first][written:]
                written = 0


class SegmentWriter:
    """Appends to the open segment; the caller decides when to sync and when to rotate."""

    def __init__(self, folder: Path, seq: int) -> None:
        self.folder = folder
        self.seq = seq
        self.records = 0
        self._file = open(segment_path(folder, seq), "ab", buffering=0)  # noqa: SIM115
        self._size = self._file.tell()
        fsync_dir(folder)

    def append(self, payloads: Iterable[bytes]) -> None:
        """Append records; on failure cut the file back so no torn record precedes later ones."""
        parts = []
        for payload in payloads:
            parts += (_header(DATA, payload), payload)
        try:
            _write_all(self._file.fileno(), parts)
        except OSError:
            self._file.truncate(self._size)
            raise
        self._size += sum(map(len, parts))
        self.records += len(parts) // 2

    def sync(self) -> None:
        os.fdatasync(self._file.fileno())

    def close(self, partition: str) -> None:
        """Seal the segment with the partition its rows are about to be written to."""
        self._file.write(_frame(COMMIT, partition.encode()))
        self.sync()
        self._file.close()

    def discard(self) -> None:
        """Close and delete an empty segment."""
        self._file.close()
        segment_path(self.folder, self.seq).unlink(missing_ok=True)


def lock_folder(folder: Path) -> int:
    """Take an exclusive lock on the WAL folder: two collectors must never share one."""
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise RuntimeError(
            f"WAL folder {folder} is in use by another collector; give each collector its own --wal-dir"
        ) from None
    return fd
