"""Loopback helpers for tests and benchmarks that start servers in other processes."""

from __future__ import annotations

import socket
import time

import httpx


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago, for a server that cannot be told to bind port 0.

    Another process may take it before the server binds it; servers that can report the
    port they bound (``--port 0``) are the better choice where there is one.
    """
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def wait_http(url: str, timeout_s: float = 120.0) -> None:
    """Return once ``url`` answers anything below 500; raise ``TimeoutError`` naming it otherwise."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=2).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{url} did not answer within {timeout_s:g}s")
