"""Files committed whole, on local disk or object storage: immutable Parquet files, and small files
(manifests, records, registries) written whole and replaced in one step.

Readers (DuckDB globs, the pipeline) must never see a half-written file: locally a
file is written under a hidden temporary name beside its place (:func:`temporary_name`:
``.NAME.<unique>.tmp``), fsynced, then renamed into place; on object stores an upload
becomes visible only when complete. Parquet files are partitioned by hour so a scheduled
job can skip what it has already read.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq


def resolve(uri: str | os.PathLike) -> tuple[pafs.FileSystem, str]:
    """Filesystem and path for a local folder or a URI such as ``s3://bucket/prefix``."""
    text = os.fspath(uri)
    if "://" in text:
        return pafs.FileSystem.from_uri(text)
    return pafs.LocalFileSystem(), str(Path(text).resolve())


def hour_partition(unix_nano: int | None = None) -> str:
    seconds = (unix_nano / 1e9) if unix_nano is not None else time.time()
    t = time.gmtime(seconds)
    return f"date={t.tm_year:04d}-{t.tm_mon:02d}-{t.tm_mday:02d}/hour={t.tm_hour:02d}"


def temporary_name(name: str) -> str:
    """The hidden name a file called ``name`` is written under before it is renamed into place.

    ``.NAME.<unique>.tmp``: the leading dot hides it from every reader of a folder (DuckDB's and
    pyarrow's dataset globs, ``datasets``), the unique part keeps two writers of the same name
    (two processes, two threads) from writing into one file, and ``.tmp`` lets cleanup code
    recognise what a killed writer left."""
    return f".{name}.{uuid.uuid4().hex[:12]}.tmp"


def write_atomic(path: str | os.PathLike, data: bytes | str, *, filesystem: pafs.FileSystem | None = None) -> None:
    """Write ``data`` (``str``: as UTF-8) as the whole content of the file ``path``, replacing it in one step.

    ``path``: a local path or a URI such as ``s3://bucket/key``; or, with ``filesystem``, a path in
    that filesystem's own terms. Its folder must exist (locally). For small files written whole
    (manifests, records, registries); append-only files (a WAL, JSONL logs) are not written this way.

    Locally, each step is there for a reason:

    1. write to :func:`temporary_name` in the same folder: a reader of ``path`` meanwhile sees the
       old content whole, and a crash mid-write leaves only a hidden ``.tmp`` file that readers skip
       (and cleanup may delete); the same folder, so that the rename below stays within one filesystem;
    2. fsync the file: otherwise, after a power loss, the rename may be durable while the data is
       not, and ``path`` would be empty or truncated;
    3. ``os.replace``: atomic on POSIX, so a reader opening ``path`` gets the old file or the new one,
       never part of either;
    4. fsync the folder: makes the rename itself durable (until then a crash may bring the old
       content back, after a caller has acted on the new one).

    If any step fails, the temporary file is removed and ``path`` keeps its old content.
    On an object store (pyarrow's S3, GCS...) an object appears only once its upload completes,
    so one put does all of that.
    """
    body = data.encode("utf-8") if isinstance(data, str) else data
    target = os.fspath(path)
    if filesystem is None and "://" in target:
        filesystem, target = pafs.FileSystem.from_uri(target)
    if filesystem is not None and not isinstance(filesystem, pafs.LocalFileSystem):
        with filesystem.open_output_stream(target) as stream:
            stream.write(body)
        return
    folder, name = os.path.split(target)
    tmp = os.path.join(folder, temporary_name(name))
    try:
        with open(tmp, "xb") as handle:
            handle.write(body)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    fsync_dir(folder or ".")


def new_file_name(prefix: str) -> str:
    # time first so that names sort by creation; uuid so instances never collide
    return f"{prefix}-{time.time_ns():020d}-{uuid.uuid4().hex[:12]}.parquet"


class AtomicParquetFile:
    """One new immutable Parquet file, written a row group at a time and committed whole.

    Until :meth:`commit` the file lives under a dot-name (locally) or as an unfinished
    upload (object stores), so readers see all of it or nothing; :meth:`discard` (or
    leaving the ``with`` block by an exception) removes what was written. Writing in row
    groups lets a producer stream a file far larger than the memory it holds.
    ``write_options`` go to :class:`pyarrow.parquet.ParquetWriter` (e.g. ``use_dictionary``).
    """

    def __init__(
        self, root: str | os.PathLike, schema: pa.Schema, *, prefix: str, partition: str | None = None,
        compression: str = "zstd", filesystem: pafs.FileSystem | None = None, **write_options: Any,
    ) -> None:
        # root: a folder or URI; or, with ``filesystem``, a path in that filesystem's own terms
        self._fs, base = (filesystem, os.fspath(root)) if filesystem is not None else resolve(root)
        folder = f"{base}/{partition}" if partition else base
        name = new_file_name(prefix)
        self.path = f"{folder}/{name}"
        self._folder = folder
        self._local = isinstance(self._fs, pafs.LocalFileSystem)
        if self._local:
            os.makedirs(folder, exist_ok=True)
            self._tmp = f"{folder}/{temporary_name(name)}"
            # Written by Arrow's own file (C++): pyarrow writing through a Python file object takes
            # the GIL for every page it writes, and when the process's other threads are busy (an
            # agent's calls) each of those hand-overs is paid in CPU: 4x the writer's own cost here
            # (5 -> 20 ms per file). Encoding into memory first avoided that too, but copied large
            # files twice (the in-process exporter's throughput fell ~20 %).
            self._stream = pa.OSFile(self._tmp, "wb")
        else:
            self._fs.create_dir(folder, recursive=True)
            self._stream = self._fs.open_output_stream(self.path)
        self._writer = pq.ParquetWriter(self._stream, schema, compression=compression, **write_options)

    def write(self, table: pa.Table) -> None:
        """Append ``table`` as the file's next row group(s)."""
        self._writer.write_table(table)

    def commit(self) -> str:
        """Finish the file and make it visible, durably; return its path."""
        self._writer.close()
        self._stream.close()
        if self._local:
            fsync_file(self._tmp)
            os.replace(self._tmp, self.path)
            fsync_dir(self._folder)
        return self.path

    def discard(self) -> None:
        """Drop what was written; the file never becomes visible."""
        try:
            self._writer.close()
        finally:
            self._stream.close()
            if self._local and os.path.exists(self._tmp):
                os.unlink(self._tmp)
            elif not self._local:
                self._fs.delete_file(self.path)  # the upload completed on close: remove it

    def __enter__(self) -> AtomicParquetFile:
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        if kind is None:
            self.commit()
        else:
            self.discard()


def write_parquet_atomic(
    table: pa.Table,
    root: str | os.PathLike,
    *,
    prefix: str,
    partition: str | None = None,
    compression: str = "zstd",
    **write_options: Any,
) -> str:
    """Write ``table`` as one new immutable file under ``root[/partition]``; return its path."""
    with AtomicParquetFile(root, table.schema, prefix=prefix, partition=partition, compression=compression,
                           **write_options) as file:
        file.write(table)
    return file.path


def fsync_file(path: str | os.PathLike) -> None:
    """Make a written file's data durable (any descriptor of the file flushes it)."""
    _fsync(path, os.O_WRONLY)


def fsync_dir(folder: str | os.PathLike) -> None:
    """Make a rename or a new file in ``folder`` itself durable (POSIX needs the directory synced)."""
    _fsync(folder, os.O_RDONLY)


def _fsync(path: str | os.PathLike, flags: int) -> None:
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
