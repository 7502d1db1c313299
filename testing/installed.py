"""Tests of optional installs: skipped on a developer's machine, failed in CI.

README's two commands install the core, the torch backend and the frameworks; the OpenRLHF
backend, the CPU vLLM and Chromium are extra installs that ``.ci/run`` makes. A test of one of
those skips, saying how to install it, where it is missing, but CI (``CI`` set, as ``.ci/run``
does) must not pass by skipping what it was supposed to run.
"""

from __future__ import annotations

import importlib.util
import os

import pytest


def require(present: bool, what: str, how: str) -> None:
    """Skip (or, under CI, fail) the calling test or module unless ``present``."""
    if present:
        return
    message = f"{what} is not installed: {how}"
    if os.environ.get("CI"):
        pytest.fail(f"{message} (.ci/run installs it; CI must not skip this)", pytrace=False)
    pytest.skip(message, allow_module_level=True)


OPENRLHF_HOW = "see trainer/README.md, 'The OpenRLHF backend' (deepspeed, the [openrlhf] extra, openrlhf, flash-attn)"


def require_openrlhf() -> None:
    require(importlib.util.find_spec("openrlhf") is not None, "openrlhf", OPENRLHF_HOW)
