"""Loopback helpers for tests and benchmarks that start servers in other processes (a free port is
:func:`tracerl.core.net.free_port`, which the product needs too)."""

from __future__ import annotations

import time

import httpx


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
