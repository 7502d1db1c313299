"""Every skip of the suite goes through here: a missing install skips on a developer's machine and fails in CI.

README's two commands install the core, the torch backend and the frameworks; the OpenRLHF
backend, the CPU vLLM, Chromium and the side venvs are extra installs that ``.ci/run`` makes. A
test of one of those skips, saying how to install it, where it is missing, but CI (``CI`` set,
as ``.ci/run`` does) must not pass by skipping what it was supposed to run.

The helpers, the only spellings of a skip tests/test_skips.py lets a test use:

- :func:`require` (``present``, what, how): the base of the others, for any install a test
  checks itself (a venv's python, a browser on the PATH, a distribution's metadata);
- :func:`require_module` (name, how): the module imported, as ``pytest.importorskip`` did;
- :func:`require_openrlhf`: the OpenRLHF backend's install;
- :func:`require_cuda` (present, why): the machine's hardware, the one skip CI allows.

:func:`pytest_runtest_makereport` and :func:`pytest_make_collect_report`, hooks that
tests/conftest.py imports, fail under CI any skip (of a test, or of a whole module at import) whose
reason is not one of :data:`ALLOWED_UNDER_CI`, whatever spelled it.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from types import ModuleType

import pytest

CUDA_ABSENT = "CUDA absent"
"""How a skip of a test that needs a GPU begins (:func:`require_cuda`)."""
CUDA_PRESENT = "CUDA present"
"""How a skip of a test of the CPU path begins, on a CUDA machine that takes the other path (:func:`require_cuda`)."""
ALLOWED_UNDER_CI = (CUDA_ABSENT, CUDA_PRESENT)
"""The reasons a skip may begin with under CI: the machine's hardware, never an install."""


def under_ci() -> bool:
    """Whether this run is CI's (``CI`` set to anything but empty, ``0`` or ``false``)."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false")


def require(present: bool, what: str, how: str) -> None:
    """Skip (or, under CI, fail) the calling test or module unless ``present``."""
    if present:
        return
    message = f"{what} is not installed: {how}"
    if under_ci():
        pytest.fail(f"{message} (.ci/run installs it; CI must not skip this)", pytrace=False)
    pytest.skip(message, allow_module_level=True)


def require_module(name: str, how: str) -> ModuleType:
    """``name`` imported; where it (or a module it imports) is not installed, :func:`require` skips or fails.

    A module that is installed but fails to import for another reason raises, as any broken install should.
    """
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as missing:
        require(False, missing.name or name, how)
        raise  # not reached: require() raised


OPENRLHF_HOW = "see src/tracerl/trainer/README.md, 'The OpenRLHF backend' (deepspeed, the [openrlhf] extra, openrlhf, flash-attn)"


def require_openrlhf() -> None:
    require(importlib.util.find_spec("openrlhf") is not None, "openrlhf", OPENRLHF_HOW)


def require_cuda(present: bool = True, why: str = "this test needs a GPU") -> None:
    """Skip the calling test or module unless the machine's CUDA is ``present`` (True) or absent (False).

    A hardware skip, the one kind CI allows: it never fails. ``why`` says what the test needs the
    machine for; a test of the CPU path passes ``present=False`` (a CUDA machine takes the other path).
    """
    import torch

    if torch.cuda.is_available() == present:
        return
    pytest.skip(f"{CUDA_ABSENT if present else CUDA_PRESENT}: {why}", allow_module_level=True)


def skip_reason(longrepr: object) -> str:
    """The reason of a skipped report (pytest keeps it as ``(path, line, "Skipped: reason")``)."""
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        message = str(longrepr[2])
    else:
        message = str(longrepr)
    return message.removeprefix("Skipped: ")


def ci_verdict(report: pytest.TestReport | pytest.CollectReport) -> None:
    """Under CI, turn ``report`` from skipped into failed unless its reason is an allowed one.

    An expected failure (``xfail``, reported as skipped with ``wasxfail``) is not a skip and is left as it is.
    """
    if not (report.skipped and under_ci()) or hasattr(report, "wasxfail"):
        return
    reason = skip_reason(report.longrepr)
    if reason.startswith(ALLOWED_UNDER_CI):
        return
    report.outcome = "failed"
    report.longrepr = (
        f"skipped under CI: {reason}\nCI allows a skip only for {', '.join(ALLOWED_UNDER_CI)} "
        "(tracerl_testing/installed.py: require_cuda); an install that is missing must fail, and .ci/run installs it"
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> pytest.TestReport:
    report = yield
    ci_verdict(report)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> pytest.CollectReport:
    report = yield
    ci_verdict(report)  # a module skipped at import
    return report
