"""Where a build's input lives: a local folder, or a folder of any pyarrow filesystem (``s3://...``).

The collector writes its tables to a local folder or to object storage, partitioned by
hour, several instances side by side, each file committed whole (locally by an atomic
rename of a dot-named file, on object stores by the upload completing). The pipeline
reads both the same way: it lists the Parquet files once per build and reads exactly
that list, so a file that appears while a build runs is left for the next build, never
read half.

Two readers touch the files: DuckDB (every stage's SQL) and pyarrow (footers, and the
token arrays the writer reads). pyarrow opens any URI it knows (``s3://``, ``gs://``,
``abfs://``, ``hdfs://``; query parameters such as ``endpoint_override`` or ``region`` as
``pyarrow.fs.FileSystem.from_uri`` takes them). DuckDB reads remote files through that
same pyarrow filesystem, registered with the connection via fsspec's wrapper: DuckDB's
own ``httpfs`` extension is downloaded on first use, which fails offline (checked: DuckDB
2.0 has it as an installable, not a built-in, extension), and it would need the
credentials and endpoint a second time, in DuckDB's terms.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import urlsplit

import duckdb
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from tracerl.core.compaction_log import is_hidden, is_record, visible_files
from tracerl.core.storage import resolve


@dataclass(frozen=True)
class Location:
    """A folder on a pyarrow filesystem; ``scheme`` is ``None`` for the local disk."""

    fs: pafs.FileSystem
    path: str  # in the filesystem's own terms: an absolute local path, or "bucket/prefix"
    scheme: str | None

    @property
    def is_local(self) -> bool:
        return self.scheme is None

    def __str__(self) -> str:
        """The folder as DuckDB and people name it; never the URI's query or user part (credentials live there)."""
        return self.name(self.path)

    def name(self, path: str) -> str:
        """The name DuckDB reads ``path`` (a path of this filesystem) by."""
        return path if self.is_local else f"{self.scheme}://{path}"

    def child(self, name: str) -> Location:
        return Location(self.fs, f"{self.path.rstrip('/')}/{name}", self.scheme)

    def kind(self) -> pafs.FileType:
        return self.fs.get_file_info(self.path).type

    def files(self, suffix: str = ".parquet") -> list[str]:
        """Every file named ``*{suffix}`` below this folder that a reader reads, by the name DuckDB reads it by, sorted.

        Names with a part starting with ``.`` are skipped: files still being written
        (``tracerl.core.storage`` writes under a dot-name, then renames) or tool metadata. Where
        compaction ran, its records decide which of old and new files are read
        (:mod:`tracerl.core.compaction_log`). One listing: what it returns is what the build reads.
        """
        listed = []
        root = self.path.rstrip("/")
        for info in self.fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True)):
            relative = info.path[len(root):].lstrip("/")
            if info.type == pafs.FileType.File and (relative.endswith(suffix) or is_record(relative)):
                if not is_hidden(relative):
                    listed.append(info.path)
        return [self.name(path) for path in visible_files(listed, self.fs, suffix)]

    def _own_path(self, name: str) -> str:
        return name if self.is_local else name.removeprefix(f"{self.scheme}://")

    def read_schema(self, name: str) -> pa.Schema:
        """The schema in the footer of file ``name`` (as :meth:`parquet_files` names it)."""
        return pq.read_schema(self._own_path(name), filesystem=self.fs)

    def read_table(self, name: str, columns: list[str]) -> pa.Table:
        return pq.read_table(self._own_path(name), columns=columns, filesystem=self.fs)

    def is_file(self, name: str) -> bool:
        return self.fs.get_file_info(self._own_path(name)).type == pafs.FileType.File

    def register(self, con: duckdb.DuckDBPyConnection) -> None:
        """Let ``con`` read this location's files by their names (nothing to do for local files).

        One store per scheme and connection: the spans' store also serves a data dir's
        ``rewards/`` and any ``--rewards`` URI of the same scheme.
        """
        if self.is_local or self.scheme in con.list_filesystems():
            return
        con.register_filesystem(_duckdb_filesystem(self))


def _duckdb_filesystem(location: Location):
    """fsspec's wrapper of the location's pyarrow filesystem, answering to the location's scheme.

    DuckDB sends a name to the registered filesystem whose ``protocol`` is the name's
    scheme; the wrapper would answer to pyarrow's type name ("gcs" for ``gs://``) and
    strip schemes its own way, so both are set to the names :meth:`Location.name` makes.
    """
    try:
        from fsspec.implementations.arrow import ArrowFSWrapper
    except ImportError as exc:
        raise ValueError(f"reading {location} needs fsspec: pip install fsspec (or tracerl[s3])") from exc

    prefix = f"{location.scheme}://"

    class Wrapper(ArrowFSWrapper):
        protocol = location.scheme

        @classmethod
        def _strip_protocol(cls, path: str) -> str:
            return path.removeprefix(prefix)

    return Wrapper(location.fs)


def locate(where: str | os.PathLike) -> Location:
    """The :class:`Location` of a local folder or a URI such as ``s3://bucket/prefix?region=eu-west-1``."""
    text = os.fspath(where)
    if "://" not in text:
        fs, path = resolve(text)
        return Location(fs, path, None)
    scheme = urlsplit(text).scheme
    if scheme == "file":
        fs, path = resolve(text)
        return Location(fs, path, None)
    try:
        fs, path = resolve(text)
    except (pa.ArrowException, ValueError, OSError) as exc:
        raise ValueError(f"{text}: pyarrow cannot open this URI ({exc}); use a local folder or e.g. s3://bucket/prefix") from exc
    return Location(fs, path.rstrip("/"), scheme)
