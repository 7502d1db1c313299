"""Run both front ends over one :class:`Collector`, in the foreground or in the background.

Start order matters for durability: the WAL is replayed before any port opens, and on
shutdown the ports close before the last rows are committed to Parquet.
"""

from __future__ import annotations

import signal
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import uvicorn

from tracerl.collector.grpc_server import create_server
from tracerl.collector.http_server import create_app
from tracerl.collector.service import Collector, CollectorConfig
from tracerl.uvicorn_thread import UvicornThread


@dataclass
class Endpoints:
    host: str = "127.0.0.1"
    http_port: int = 4318  # 0: any free port
    grpc_port: int | None = 4317  # None: no gRPC
    tls_cert: Path | None = None
    tls_key: Path | None = None
    reuse_port: bool = False  # several worker processes share the ports (SO_REUSEPORT)


def bind(host: str, port: int, reuse_port: bool) -> socket.socket:
    """A TCP socket bound to ``host:port`` (IPv4 or IPv6), not yet listening.

    With ``reuse_port`` several processes bind the same port and the kernel spreads the
    connections over them (``--workers``).
    """
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
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
        (benchmarks/collector_overload.py: 307 vs 252 MiB peak) with no throughput gained.
        """
        pa.set_memory_pool(pa.system_memory_pool())
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
