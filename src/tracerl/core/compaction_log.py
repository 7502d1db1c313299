"""The records compaction leaves in a partition, and which files a reader sees because of them.

Compaction (``tracerl collector compact``) rewrites the small files of one hour partition into a
few large ones. No filesystem, and no object store, swaps many files for others in one step, so
the swap is a protocol that every reader of this project follows (the pipeline's one listing,
:meth:`tracerl.pipeline.location.Location.files`, and the collector's WAL replay):

1. The marker ``_compaction-<id>.pending`` is written, then the new files under names that say
   which compaction wrote them, ``compact-<id>-....parquet``. Until step 2 a reader ignores them;
   a pass killed before step 2 leaves them to the next pass, which deletes exactly the files its
   pending marker names by id, and nothing else (a writer's file is never taken for one of them:
   writers may not start names with ``compact-``, ``_`` or ``.``, :func:`check_writer_prefix`).
2. The record ``_compaction-<id>.json`` (the inputs it replaces, the outputs it wrote, their
   rows) is written in one put: the commit. From then on a reader sees the outputs and no longer
   the inputs. A reader therefore sees the old files or the new ones, never both, never neither.
3. After a grace period (readers that listed before the commit may still be reading the inputs)
   the inputs are deleted, then the marker ``_compaction-<id>.done`` is written: readers need not
   open a record whose inputs are gone.

Records stay: they are small (one per partition and pass) and the collector's WAL replay asks
them whether a segment it is about to write again was written, and compacted, already.

Names starting with ``.`` (in the file or a folder above it) are never data: files still being
written (``tracerl.core.storage`` writes under a dot-name, then renames) and tool metadata such as
a ``.backup-of-X.parquet`` copy.

A plain glob (``read_parquet('spans/**/*.parquet')``) does not know the protocol: between the
commit and the deletion of the inputs it would read both. Read with the pipeline (a query of
your own: ``tracerl.pipeline.source.raw_spans_of``, or ``tracerl sql``), or after the grace period.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from posixpath import basename, dirname

import pyarrow.fs as pafs

RECORD_PREFIX = "_compaction-"
RECORD_SUFFIX = ".json"
DONE_SUFFIX = ".done"
PENDING_SUFFIX = ".pending"
OUTPUT_PREFIX = "compact-"
_OUTPUT = re.compile(r"^compact-([0-9a-f]{16})-")
_RECORD = re.compile(r"^_compaction-([0-9a-f]{16})\.(json|done|pending)$")
_RESERVED = (OUTPUT_PREFIX, "_", ".")


@dataclass
class CompactionRecord:
    """What one compaction of one partition replaced: file names are relative to the partition."""

    id: str
    inputs: list[str]
    outputs: list[str]
    rows: int
    committed_at: float  # unix seconds; the grace period counts from here
    input_bytes: int = 0
    output_bytes: int = 0

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    @classmethod
    def from_json(cls, text: str) -> CompactionRecord:
        return cls(**json.loads(text))


def record_name(compaction_id: str) -> str:
    return f"{RECORD_PREFIX}{compaction_id}{RECORD_SUFFIX}"


def done_name(compaction_id: str) -> str:
    return f"{RECORD_PREFIX}{compaction_id}{DONE_SUFFIX}"


def pending_name(compaction_id: str) -> str:
    return f"{RECORD_PREFIX}{compaction_id}{PENDING_SUFFIX}"


def check_writer_prefix(prefix: str) -> str:
    """``prefix`` if a writer may start its file names with it, else ValueError saying why.

    Names starting with ``compact-`` are compaction's outputs, which readers ignore until a record
    commits them; ``_`` and ``.`` names are records and hidden files. A writer using them would see
    its acknowledged data ignored or taken for someone else's."""
    if not prefix or "/" in prefix or prefix.startswith(_RESERVED):
        raise ValueError(f"instance id / file prefix {prefix!r} is not allowed: it must be non-empty, without '/', "
                         f"and not start with {', '.join(repr(r) for r in _RESERVED)} (names compaction and readers reserve)")
    return prefix


def is_hidden(relative: str) -> bool:
    """Is a path (relative to a table folder) hidden from readers: a part of it starts with ``.``?"""
    return any(part.startswith(".") for part in relative.split("/"))


def output_id(name: str) -> str | None:
    """The compaction that wrote file ``name`` (a base name), or None for a file a writer made."""
    match = _OUTPUT.match(name)
    return match.group(1) if match else None


def record_id(name: str) -> tuple[str, str] | None:
    """``(id, "json" | "done" | "pending")`` for a record or marker base name, else None."""
    match = _RECORD.match(name)
    return (match.group(1), match.group(2)) if match else None


def is_record(name: str) -> bool:
    return record_id(basename(name)) is not None


@dataclass
class PartitionState:
    """One partition's files as one listing saw them, with the records among them."""

    parquet: list[str] = field(default_factory=list)  # base names
    committed: set[str] = field(default_factory=set)  # ids with a record
    done: set[str] = field(default_factory=set)  # ids whose inputs are deleted
    pending: set[str] = field(default_factory=set)  # ids of passes that started writing outputs

    def replaced(self, read_record: Callable[[str], CompactionRecord]) -> set[str]:
        """Inputs of committed compactions whose inputs may still be there (their records are read)."""
        names: set[str] = set()
        for compaction_id in sorted(self.committed - self.done):
            names.update(read_record(compaction_id).inputs)
        return names

    def visible(self, read_record: Callable[[str], CompactionRecord]) -> list[str]:
        """The data files a reader reads: uncommitted outputs and replaced inputs left out."""
        replaced = self.replaced(read_record)
        return [name for name in self.parquet
                if name not in replaced and (output_id(name) is None or output_id(name) in self.committed)]


def partitions(paths: Iterable[str], suffix: str = ".parquet") -> dict[str, PartitionState]:
    """Group one listing's file paths (``*{suffix}`` data files and records) by folder; hidden names are no data."""
    found: dict[str, PartitionState] = defaultdict(PartitionState)
    for path in paths:
        folder, name = dirname(path), basename(path)
        if (parsed := record_id(name)) is not None:
            compaction_id, kind = parsed
            state = found[folder]
            {"json": state.committed, "done": state.done, "pending": state.pending}[kind].add(compaction_id)
        elif name.endswith(suffix) and not name.startswith("."):
            found[folder].parquet.append(name)
    return found


def read_record(fs: pafs.FileSystem, path: str) -> CompactionRecord:
    """The record at ``path`` (a path of ``fs``)."""
    with fs.open_input_stream(path) as stream:
        return CompactionRecord.from_json(stream.read().decode())


def visible_files(paths: Iterable[str], fs: pafs.FileSystem, suffix: str = ".parquet") -> list[str]:
    """The paths among ``paths`` (one listing of ``fs``, records included) that a reader reads, sorted.

    Only the records whose inputs may still exist are read."""
    result = []
    for folder, state in partitions(paths, suffix).items():
        def read(compaction_id: str, folder: str = folder) -> CompactionRecord:
            return read_record(fs, f"{folder}/{record_name(compaction_id)}")

        result.extend(f"{folder}/{name}" for name in state.visible(read))
    return sorted(result)
