"""Shared fixtures of the trainer tests."""

from __future__ import annotations

import pytest

from tracerl.trainer.serving.app import running_server


@pytest.fixture(scope="session")
def policy_server():
    """One built-in server over the tiny model, shared by the whole session.

    It stays at policy version 0: tests that load weights start their own server.
    """
    with running_server() as server:
        yield server
