"""CI cannot pass by skipping: every skip goes through ``tracerl_testing.installed``, and under CI
only the machine's hardware may skip a test.

A missing install skips through ``require`` / ``require_module`` / ``require_openrlhf`` (a
failure under CI) and the hardware through ``require_cuda``. The source check below finds any
other spelling of a skip in the test tree; the report hooks (tests/conftest.py) fail under CI a
skip that got in anyway, whatever spelled it, unless its reason is one listed here.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

from tracerl_testing import installed

REPO = Path(__file__).resolve().parents[1]

ALLOWED_UNDER_CI = {
    "CUDA absent": "a test that needs a GPU, on a machine without one (require_cuda())",
    "CUDA present": "a test of the CPU path, on a CUDA machine that takes the GPU path instead (require_cuda(present=False))",
}
"""Every reason a skip may give under CI, nothing else: the hardware, which no install changes."""

SKIP_NAMES = {"skip", "skipif", "importorskip", "xfail", "skipTest", "SkipTest", "Skipped", "skip_if", "skipUnless", "skipIf"}
"""Names that spell a skip (pytest's, unittest's) or an expected failure, which passes CI as a skip does."""
SPELLED_HERE = {Path(installed.__file__).resolve(), Path(__file__).resolve()}
"""The helpers, where a skip is spelled once, and this check, which names the spellings."""


def python_files() -> list[Path]:
    return sorted(p for root in ("tests", "testing") for p in (REPO / root).rglob("*.py") if ".egg-info" not in p.parts)


def skip_spellings(source: str) -> list[tuple[int, str]]:
    """(line, name) of each skip spelled in ``source`` (an attribute, a name, an import)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in SKIP_NAMES:
            found.append((node.lineno, node.attr))
        elif isinstance(node, ast.Name) and node.id in SKIP_NAMES:
            found.append((node.lineno, node.id))
        elif isinstance(node, ast.ImportFrom):
            found += [(node.lineno, alias.name) for alias in node.names if alias.name in SKIP_NAMES]
        elif isinstance(node, ast.Constant) and node.value in SKIP_NAMES:  # getattr(pytest, "skip")
            found.append((node.lineno, node.value))
    return found


def test_the_allowed_reasons_are_the_hardware_alone():
    assert installed.ALLOWED_UNDER_CI == tuple(ALLOWED_UNDER_CI)


def test_no_test_module_skips_but_through_the_helpers():
    spelled = {
        f"{path.relative_to(REPO)}:{line}: {name}"
        for path in python_files() if path.resolve() not in SPELLED_HERE
        for line, name in skip_spellings(path.read_text())
    }
    assert not spelled, "skip through tracerl_testing.installed (require_module, require, require_cuda) instead:\n" + "\n".join(sorted(spelled))


def test_the_source_check_finds_each_spelling():
    source = """
import pytest, unittest
from pytest import skip
from unittest import SkipTest
pytest.importorskip("x")
pytest.skip("x")
pytestmark = pytest.mark.skipif(True, reason="x")
@unittest.skip("x")
def f(self): self.skipTest("x")
@pytest.mark.xfail
def g(): getattr(pytest, "skip")("x")
"""
    assert sorted({name for _, name in skip_spellings(source)}) == ["SkipTest", "importorskip", "skip", "skipTest", "skipif", "xfail"]
    assert skip_spellings("registry.record_skip(1)\nskipped = 0\n") == []


def test_conftest_installs_the_ci_hooks():
    conftest = ast.parse((REPO / "tests" / "conftest.py").read_text())
    imported = {alias.name for node in ast.walk(conftest) if isinstance(node, ast.ImportFrom)
                and node.module == "tracerl_testing.installed" for alias in node.names}
    assert {"pytest_runtest_makereport", "pytest_make_collect_report"} <= imported


INNER_CONFTEST = "from tracerl_testing.installed import pytest_make_collect_report, pytest_runtest_makereport\n"
INNER_TESTS = """
import pytest, torch
from tracerl_testing.installed import require, require_cuda, require_module

def test_passes(): pass
def test_spelled_skip(): pytest.skip("someone's own reason")
def test_importorskip(): pytest.importorskip("no_such_module_here")
@pytest.mark.skipif(True, reason="a marker")
def test_marked(): pass
@pytest.fixture
def fixture_skips(): pytest.skip("in a fixture")
def test_fixture_skips(fixture_skips): pass
def test_missing_install(): require(False, "a thing", "install it")
def test_missing_module(): require_module("no_such_module_here", "install it")
def test_hardware(): require_cuda(present=not torch.cuda.is_available())
@pytest.mark.xfail(reason="known", strict=True)
def test_expected_failure(): assert False
"""
INNER_MODULE_SKIP = "import pytest\npytest.skip('the whole module', allow_module_level=True)\ndef test_never(): pass\n"


def run_inner(tmp_path: Path, ci: str | None) -> dict[str, str]:
    """The outcome of each test (and of the skipped module) of a small suite, run with ``CI=ci``."""
    (tmp_path / "conftest.py").write_text(INNER_CONFTEST)
    (tmp_path / "test_inner.py").write_text(INNER_TESTS)
    (tmp_path / "test_module_skip.py").write_text(INNER_MODULE_SKIP)
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_ADDOPTS")}
    if ci is not None:
        env["CI"] = ci
    done = subprocess.run([sys.executable, "-m", "pytest", "-rA", "--color=no", "-p", "no:cacheprovider", "-p", "no:xdist", "--continue-on-collection-errors",
                           "--rootdir", str(tmp_path), str(tmp_path)], capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
    outcomes = {}
    for line in done.stdout.splitlines():
        # "PASSED test_inner.py::test_passes", "SKIPPED [1] test_inner.py:6: reason", "ERROR test_inner.py::t - ...",
        # "ERROR test_module_skip.py - ...", "XFAIL test_inner.py::t - known"
        word = re.match(r"(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b", line)
        if not word:
            continue
        if word[1] == "SKIPPED":
            where = re.match(r"SKIPPED \[\d+\] (\S+?):(\d+)", line)
            name = where[1] if where[1].endswith("test_module_skip.py") else line.split(": ", 1)[1]
        else:
            name = line.split()[1].split("::")[-1]
        outcomes[name] = word[1]
    return outcomes


def test_under_ci_only_a_hardware_skip_stays_a_skip(tmp_path):
    outcomes = run_inner(tmp_path, "1")
    hardware = "CUDA present" if installed_cuda() else "CUDA absent"
    skipped = {name for name, outcome in outcomes.items() if outcome == "SKIPPED"}
    assert len(skipped) == 1 and next(iter(skipped)).startswith(hardware), outcomes
    assert outcomes["test_passes"] == "PASSED" and outcomes["test_expected_failure"] == "XFAIL"
    for name in ("test_spelled_skip", "test_importorskip", "test_missing_install", "test_missing_module"):
        assert outcomes[name] == "FAILED", (name, outcomes)
    for name in ("test_marked", "test_fixture_skips"):  # skipped in setup, failed there: an error
        assert outcomes[name] == "ERROR", (name, outcomes)
    assert outcomes["test_module_skip.py"] == "ERROR"  # a module skipped at import: a collection error


def test_elsewhere_every_skip_stays_a_skip(tmp_path):
    outcomes = run_inner(tmp_path, None)
    assert list(outcomes.values()).count("SKIPPED") == 8, outcomes  # 7 tests and the module
    assert outcomes["test_passes"] == "PASSED" and outcomes["test_expected_failure"] == "XFAIL"


def test_ci_is_any_value_but_empty_0_or_false(monkeypatch):
    for value, ci in (("1", True), ("true", True), ("yes", True), ("", False), ("0", False), ("false", False), ("False", False)):
        monkeypatch.setenv("CI", value)
        assert installed.under_ci() is ci, value
    monkeypatch.delenv("CI")
    assert not installed.under_ci()


def installed_cuda() -> bool:
    import torch

    return torch.cuda.is_available()
