"""Shared fixtures: a real collector on 127.0.0.1 (ephemeral ports) and readers of its output."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tracerl.collector.server import CollectorServer, Endpoints
from tracerl.collector.service import CollectorConfig


@pytest.fixture
def serve(tmp_path: Path) -> Callable[..., CollectorServer]:
    """Start a collector writing to ``tmp_path/data``; every one started is stopped after the test."""
    servers: list[CollectorServer] = []

    def start(*, tls: tuple[Path, Path] | None = None, **config) -> CollectorServer:
        config.setdefault("out", str(tmp_path / "data"))
        cert, key = tls or (None, None)
        server = CollectorServer(CollectorConfig(**config), Endpoints(http_port=0, grpc_port=0, tls_cert=cert, tls_key=key))
        servers.append(server.start())
        return server

    yield start
    for server in servers:
        server.stop()


def read_table(data_dir: Path, table: str = "spans") -> pa.Table:
    """Every committed Parquet file of ``table`` (dot-files are invisible, like for readers)."""
    files = sorted(p for p in (data_dir / table).glob("**/*.parquet") if not p.name.startswith("."))
    if not files:
        return pa.table({})
    return pa.concat_tables(pq.read_table(f) for f in files)


@pytest.fixture
def read() -> Callable[..., pa.Table]:
    return read_table
