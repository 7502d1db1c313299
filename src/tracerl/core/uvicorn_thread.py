"""Run an ASGI app with uvicorn in a background thread: the one way tracerl does it.

The policy server (``tracerl serve`` embedded in the demo and tests), the collector's
OTLP/HTTP front end and the test servers all need the same three things that uvicorn does
not give a caller in a thread: wait until the socket is really listening (or fail with the
server's own log above the error instead of hanging), read back the port the OS chose for
port 0, and on exit let in-flight requests finish before the thread is joined.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn


class UvicornThread:
    """A ``uvicorn.Server`` serving in a daemon thread; ``start()`` returns once it listens."""

    def __init__(self, config: uvicorn.Config, name: str = "uvicorn") -> None:
        self.server = uvicorn.Server(config)
        self.name = name
        self._thread: threading.Thread | None = None

    def start(self, sockets: list[socket.socket] | None = None, timeout_s: float = 60.0) -> UvicornThread:
        """Serve (on ``sockets`` if given, else on the config's host/port) until :meth:`stop`.

        uvicorn's ``serve`` is run in a fresh event loop so that the thread never installs
        signal handlers (only the main thread may) and the caller's loop is left alone.
        """
        server = self.server
        self._thread = threading.Thread(
            target=lambda: asyncio.run(server.serve(sockets=sockets)), name=self.name, daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop(timeout_s=10)
                config = server.config
                raise RuntimeError(f"{self.name}: the server did not start on {config.host}:{config.port} (see the log above)")
            time.sleep(0.01)
        return self

    @property
    def port(self) -> int:
        """The port actually bound (what port 0 became)."""
        return self.server.servers[0].sockets[0].getsockname()[1]

    def stop(self, timeout_s: float | None = 30.0) -> None:
        """Stop accepting, let open requests finish, join the thread (idempotent)."""
        if self._thread is None:
            return
        self.server.should_exit = True
        self._thread.join(timeout=timeout_s)
        self._thread = None


@contextmanager
def serve_in_thread(app: Any, host: str = "127.0.0.1", port: int = 0, name: str = "uvicorn", **config: Any) -> Iterator[str]:
    """Serve ``app`` on ``host:port`` (0 = a free port) for the ``with`` block; yield ``http://host:port``.

    ``config`` goes to ``uvicorn.Config`` (``lifespan``, ``log_level``...); the log level is
    ``warning`` unless given, so a library embedding a server does not print access lines.
    """
    config.setdefault("log_level", "warning")
    runner = UvicornThread(uvicorn.Config(app, host=host, port=port, **config), name=name).start()
    try:
        yield f"http://{host}:{runner.port}"
    finally:
        runner.stop()
