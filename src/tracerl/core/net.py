"""A free loopback port, for servers started in another process that cannot report the port they bound."""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago, for a server that cannot be told to bind port 0.

    Another process may take it before the server binds it; servers that can report the
    port they bound (``--port 0``, :mod:`tracerl.core.uvicorn_thread`) are the better choice where
    there is one. ``vllm serve`` is not one of them.
    """
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]
