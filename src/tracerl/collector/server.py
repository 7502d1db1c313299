"""Run both front ends over one :class:`Collector`, in the foreground or in the background.

Start order matters for durability: the WAL is replayed before any port opens, and on
shutdown the ports close before the last rows are committed to Parquet.
"""

from __future__ import annotations

import signal
import socket
import ssl
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import uvicorn

from tracerl.collector.grpc_server import create_server
from tracerl.collector.http_server import create_app
from tracerl.collector.service import Collector, CollectorConfig
from tracerl.core.uvicorn_thread import UvicornThread


@dataclass
class Endpoints:
    host: str = "127.0.0.1"
    http_port: int = 4318  # 0: any free port
    grpc_port: int | None = 4317  # None: no gRPC
    tls_cert: Path | None = None
    tls_key: Path | None = None
    reuse_port: bool = False  # several worker processes share the ports (SO_REUSEPORT)


# What the kernel may buffer of each connection's request bytes (Linux doubles it). The HTTP
# server reads up to 256 KiB of a connection before its flow control pauses it, and before the
# app has admitted the body by its Content-Length; with the kernel's auto-tuned buffers that is
# 256 KiB per connection outside every limit (64 flooding clients: 16 MiB). A receive buffer this
# size bounds it to 128 KiB and costs loopback and LAN clients nothing (collector_throughput.py:
# the same spans/s); clients that ignore Retry-After are slowed by TCP instead of being refused.
RECEIVE_BUFFER_BYTES = 64 * 1024


def bind(host: str, port: int, reuse_port: bool) -> socket.socket:
    """A TCP socket bound to ``host:port`` (IPv4 or IPv6), not yet listening; its accepted
    connections inherit a bounded receive buffer (:data:`RECEIVE_BUFFER_BYTES`).

    With ``reuse_port`` several processes bind the same port and the kernel spreads the
    connections over them (``--workers``).
    """
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER_BYTES)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    return sock


class CollectorServer:
    """``start()``/``stop()`` for embedding and tests; ``serve()`` for the CLI (until a signal)."""

    def __init__(self, config: CollectorConfig, endpoints: Endpoints, worker: int = 0) -> None:
        self.config = config
        self.endpoints = endpoints
        self.collector = Collector(config, worker)
        self.http_port = 0
        self.grpc_port: int | None = None
        self._grpc = None
        self._http: UvicornThread | None = None

    @property
    def tls(self) -> bool:
        return self.endpoints.tls_cert is not None

    def http_url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.endpoints.host}:{self.http_port}"

    def _open(self) -> socket.socket:
        """Replay the WAL, then open both ports; the HTTP socket is returned for uvicorn."""
        e = self.endpoints
        if (e.tls_cert is None) != (e.tls_key is None):
            raise ValueError("TLS needs both --tls-cert and --tls-key")
        self.collector.start()  # WAL replay happens here, before any client can connect
        try:
            sock = bind(e.host, e.http_port, e.reuse_port)
            sock.listen(2048)
            self.http_port = sock.getsockname()[1]
            if e.grpc_port is not None:
                tls = (e.tls_key.read_bytes(), e.tls_cert.read_bytes()) if self.tls else None
                self._grpc, self.grpc_port = create_server(
                    self.collector, f"{e.host}:{e.grpc_port}", tls=tls, reuse_port=e.reuse_port
                )
                self._grpc.start()
            return sock
        except BaseException:
            self._shutdown()
            raise

    def _http_config(self) -> uvicorn.Config:
        e = self.endpoints
        return uvicorn.Config(
            create_app(self.collector),
            log_level="warning",
            access_log=False,  # request lines only, but keep the log quiet at high rates
            ssl_certfile=str(e.tls_cert) if self.tls else None,
            ssl_keyfile=str(e.tls_key) if self.tls else None,
            ssl_cert_reqs=ssl.CERT_NONE,
            timeout_keep_alive=30,
            limit_concurrency=1024,  # connections beyond this get 503, not memory
        )

    def serve(self, on_ready: Callable[[], None] = lambda: None) -> None:
        """Serve in this thread until SIGINT/SIGTERM, then commit everything and return.

        The process is the collector's own, so its Arrow buffers come from the system allocator:
        Arrow's default (jemalloc) keeps ~50 MiB more freed memory resident under load
        (benchmarks/collector_overload.py: 307 vs 252 MiB peak) with no throughput gained; and
        pandas imports are refused (:func:`_without_pandas`).
        """
        pa.set_memory_pool(pa.system_memory_pool())
        _without_pandas()
        sock = self._open()
        server = uvicorn.Server(self._http_config())
        for sig in (signal.SIGINT, signal.SIGTERM):  # until uvicorn installs its own handlers
            signal.signal(sig, lambda *_: setattr(server, "should_exit", True))
        on_ready()
        try:
            server.run(sockets=[sock])
        finally:
            self._shutdown()

    def start(self) -> CollectorServer:
        """Serve in background threads; returns once both ports accept connections."""
        sock = self._open()
        try:
            self._http = UvicornThread(self._http_config(), name="otlp-http").start(sockets=[sock])
        except BaseException:
            sock.close()
            self._shutdown()
            raise
        return self

    def stop(self) -> None:
        """Close the ports, let open requests finish, then commit everything buffered to Parquet (idempotent)."""
        if self._http is None:
            return
        self._http.stop(timeout_s=None)
        self._http = None
        self._shutdown()

    def _shutdown(self) -> None:
        if self._grpc is not None:
            self._grpc.stop(grace=5).wait()
        self.collector.close()

    def __enter__(self) -> CollectorServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _without_pandas() -> None:
    """Refuse pandas imports in the collector's own process, unless something imported it already.

    When pandas is installed, pyarrow imports it on the first ``pa.array()`` call, only to ask
    whether the argument is a pandas object: 29 MiB of Python objects and 16 MiB of libraries in
    every collector worker, a third of its memory under overload (benchmarks/collector_overload.py),
    for a library the collector never uses. Refused, pyarrow goes on as if it were not installed.
    (``sys.modules["pandas"] = None`` is not enough: pyarrow's Cython import reads it as the module.)
    """
    if "pandas" not in sys.modules and not any(isinstance(f, _RefusePandas) for f in sys.meta_path):
        sys.meta_path.insert(0, _RefusePandas())


class _RefusePandas:
    """An import finder that reports pandas as not installed."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name == "pandas" or name.startswith("pandas."):
            raise ModuleNotFoundError(f"No module named {name!r} (the tracerl collector does not use pandas)", name=name)
        return None
