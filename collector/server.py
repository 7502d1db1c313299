"""Run both front ends over one :class:`Collector`, in the foreground or in the background.

Start order matters for durability: the WAL is replayed before any port opens, and on
shutdown the ports close before the last rows are committed to Parquet.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import uvicorn

from tracerl.collector.grpc_server import create_server
from tracerl.collector.http_server import create_app
from tracerl.collector.service import Collector, CollectorConfig



@dataclass
class Endpoints:
    host: str = "127.0.0.1"
    http_port: int = 4318  # 0: any free port
    grpc_port: int | None = 4317  # None: no gRPC
    tls_cert: Path | None = None
    tls_key: Path | None = None
    reuse_port: bool = False  # several worker processes share the ports (SO_REUSEPORT)


class CollectorServer:
    """``start()``/``stop()`` for embedding and tests; ``serve()`` for the CLI (until a signal)."""

    def __init__(self, config: CollectorConfig, endpoints: Endpoints, worker: int = 0) -> None:
        self.config = config
        self.endpoints = endpoints
        self.collector = Collector(config, worker)
        self.http_port = 0
        self.grpc_port: int | None = None
        self._uvicorn: uvicorn.Server | None = None
        self._grpc = None
        self._thread: threading.Thread | None = None

    @property
    def tls(self) -> bool:
        return self.endpoints.tls_cert is not None

    def http_url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.endpoints.host}:{self.http_port}"

    def _open(self) -> socket.socket:
        e = self.endpoints
        if (e.tls_cert is None) != (e.tls_key is None):
            raise ValueError("TLS needs both --tls-cert and --tls-key")
        self.collector.start()  # WAL replay happens here, before any client can connect
        try:
            return self._bind()
        except BaseException:
            self._shutdown()
            raise

    def _bind(self) -> socket.socket:
        e = self.endpoints
        sock = socket.socket(socket.AF_INET6 if ":" in e.host else socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if e.reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((e.host, e.http_port))
        sock.listen(2048)
        self.http_port = sock.getsockname()[1]
        if e.grpc_port is not None:
            tls = (e.tls_key.read_bytes(), e.tls_cert.read_bytes()) if self.tls else None
            self._grpc, self.grpc_port = create_server(
                self.collector, f"{e.host}:{e.grpc_port}", tls=tls, reuse_port=e.reuse_port
            )
            self._grpc.start()
        self._uvicorn = uvicorn.Server(
            uvicorn.Config(
                create_app(self.collector),
                log_level="warning",
                access_log=False,  # request lines only, but keep the log quiet at high rates
                ssl_certfile=str(e.tls_cert) if self.tls else None,
                ssl_keyfile=str(e.tls_key) if self.tls else None,
                ssl_cert_reqs=ssl.CERT_NONE,
                timeout_keep_alive=30,
                limit_concurrency=1024,  # connections beyond this get 503, not memory
            )
        )
        return sock

    def serve(self, on_ready: Callable[[], None] = lambda: None) -> None:
        """Serve in this thread until SIGINT/SIGTERM, then commit everything and return."""
        sock = self._open()
        for sig in (signal.SIGINT, signal.SIGTERM):  # until uvicorn installs its own handlers
            signal.signal(sig, lambda *_: setattr(self._uvicorn, "should_exit", True))
        on_ready()
        try:
            self._uvicorn.run(sockets=[sock])
        finally:
            self._shutdown()

    def start(self) -> CollectorServer:
        sock = self._open()
        self._thread = threading.Thread(
            target=lambda: asyncio.run(self._uvicorn.serve(sockets=[sock])), name="otlp-http", daemon=True
        )
        self._thread.start()
        while not self._uvicorn.started:
            if not self._thread.is_alive():
                raise RuntimeError("the OTLP/HTTP server failed to start; see the log above")
            threading.Event().wait(0.01)
        return self

    def stop(self) -> None:
        """Close the ports, then commit everything buffered to Parquet (idempotent)."""
        if self._thread is None:
            return
        self._uvicorn.should_exit = True
        self._thread.join()
        self._thread = None
        self._shutdown()

    def _shutdown(self) -> None:
        if self._grpc is not None:
            self._grpc.stop(grace=5).wait()
        self.collector.close()

    def __enter__(self) -> CollectorServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
