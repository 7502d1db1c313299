"""``tracerl.core.storage``: small files written whole (:func:`write_atomic`) and the temporary names it
shares with :class:`AtomicParquetFile`."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from tracerl.core import storage
from tracerl.core.storage import AtomicParquetFile, temporary_name, write_atomic

TEMPORARY = re.compile(r"^\.(?P<name>.+)\.[0-9a-f]{12}\.tmp$")


def test_temporary_names_are_hidden_unique_and_name_their_file():
    first, second = temporary_name("registry.json"), temporary_name("registry.json")
    assert first != second
    for name in (first, second):
        match = TEMPORARY.match(name)
        assert match and match.group("name") == "registry.json"


def test_write_atomic_replaces_the_content_whole(tmp_path: Path):
    path = tmp_path / "manifest.json"
    write_atomic(path, b"x" * 10_000)
    write_atomic(path, "short é")  # str: UTF-8; shorter: nothing of the old content stays
    assert path.read_bytes() == "short é".encode()
    assert os.listdir(tmp_path) == ["manifest.json"]  # no temporary left beside it


def test_write_atomic_takes_a_string_path_and_an_empty_body(tmp_path: Path):
    write_atomic(str(tmp_path / "_done"), b"")
    assert (tmp_path / "_done").read_bytes() == b""


def test_a_failed_write_keeps_the_old_content_and_leaves_no_temporary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    path = tmp_path / "registry.json"
    path.write_text("old")

    def fail(fd: int) -> None:  # the data could not be made durable (EIO, a full disk on a lazy filesystem)
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", fail)
    with pytest.raises(OSError, match="Input/output error"):
        write_atomic(path, "new")
    assert path.read_text() == "old"
    assert os.listdir(tmp_path) == ["registry.json"]


def test_a_missing_folder_is_an_error_not_a_new_folder(tmp_path: Path):
    with pytest.raises(FileNotFoundError):
        write_atomic(tmp_path / "gone" / "f", b"x")
    assert os.listdir(tmp_path) == []


def test_a_failed_rename_keeps_the_old_content_and_leaves_no_temporary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    path = tmp_path / "registry.json"
    path.write_text("old")
    written: list[str] = []

    def fail(source: str, target: str) -> None:
        written.append(Path(source).read_text())  # the new content was whole, under a hidden name
        assert TEMPORARY.match(Path(source).name) and Path(source).parent == tmp_path
        raise OSError("rename failed")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match="rename failed"):
        write_atomic(path, "new")
    assert written == ["new"]
    assert path.read_text() == "old"
    assert os.listdir(tmp_path) == ["registry.json"]


def test_write_atomic_fsyncs_the_file_before_the_rename_and_the_folder_after(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    steps: list[str] = []
    fsync, replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (steps.append("fsync file"), fsync(fd))[1])
    monkeypatch.setattr(os, "replace", lambda a, b: (steps.append("replace"), replace(a, b))[1])
    monkeypatch.setattr(storage, "fsync_dir", lambda folder: steps.append(f"fsync {Path(folder).name}"))
    write_atomic(tmp_path / "f", b"data")
    assert steps == ["fsync file", "replace", f"fsync {tmp_path.name}"]


def test_write_atomic_through_a_local_filesystem_object(tmp_path: Path):
    write_atomic(f"{tmp_path}/_compaction-x.json", "{}", filesystem=pafs.LocalFileSystem())
    assert (tmp_path / "_compaction-x.json").read_text() == "{}"
    assert os.listdir(tmp_path) == ["_compaction-x.json"]


def test_atomic_parquet_file_writes_under_the_same_temporary_names(tmp_path: Path):
    schema = pa.schema([("a", pa.int64())])
    with AtomicParquetFile(tmp_path, schema, prefix="spans") as file:
        file.write(pa.table({"a": [1]}, schema=schema))
        (hidden,) = os.listdir(tmp_path)
        match = TEMPORARY.match(hidden)
        assert match and match.group("name") == Path(file.path).name
    assert os.listdir(tmp_path) == [Path(file.path).name]


def test_write_atomic_on_an_object_store_is_one_put(s3: str):
    fs, _ = pafs.FileSystem.from_uri(f"s3://traces/?endpoint_override={s3.removeprefix('http://')}&scheme=http&region=us-east-1")
    uri = f"s3://traces/state/registry.json?endpoint_override={s3.removeprefix('http://')}&scheme=http&region=us-east-1"
    write_atomic(uri, "old")
    write_atomic("traces/state/registry.json", b"new", filesystem=fs)
    with fs.open_input_stream("traces/state/registry.json") as stream:
        assert stream.read() == b"new"
    listed = fs.get_file_info(pafs.FileSelector("traces/state"))
    assert [info.base_name for info in listed] == ["registry.json"]  # no temporary object
