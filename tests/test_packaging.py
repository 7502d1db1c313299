"""Every package folder ships, and the checkout never stands in for the installed package.

setuptools finds the packages under src/ by their ``__init__.py``: a folder of modules without
one works from the source tree's tests and is missing from the wheel.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_folder_of_modules_is_a_package():
    folders = {file.parent for file in (ROOT / "src" / "tracerl").rglob("*.py")}
    assert sorted(str(f.relative_to(ROOT)) for f in folders if not (f / "__init__.py").exists()) == []


def test_the_repo_root_holds_no_folder_named_like_the_package():
    """Python started in the checkout puts the checkout first on sys.path: a ``tracerl/`` folder there
    would shadow the installed package (tests/instrumentation/test_bare_install.py runs that case)."""
    assert not (ROOT / "tracerl").exists()


def test_every_module_an_extra_names_is_installed_by_the_full_install():
    from tracerl.core.extras import EXTRAS, missing_modules

    assert {extra: missing_modules(extra) for extra in EXTRAS} == {extra: [] for extra in EXTRAS}


def test_a_part_whose_extra_is_missing_keeps_its_commands_and_says_what_to_install(monkeypatch):
    from typer.testing import CliRunner

    from tracerl import cli
    from tracerl.core import extras

    monkeypatch.setitem(extras.EXTRAS, "pipeline", (*extras.EXTRAS["pipeline"], "tracerl_no_such_module"))
    app = cli.build_app()
    result = CliRunner().invoke(app, ["report", "data", "--out", "r.html"])
    assert result.exit_code == 2
    assert "`tracerl report` needs the 'pipeline' extra (tracerl_no_such_module not installed): pip install 'tracerl[pipeline]'" in result.output
    assert "needs the 'pipeline' extra" in CliRunner().invoke(app, ["--help"]).output
    assert CliRunner().invoke(app, ["run", "--help"]).exit_code == 0  # the core's commands are all there


def test_a_part_that_fails_to_import_for_a_module_its_extra_brings_says_what_to_install(monkeypatch):
    """An environment holding some of an extra's packages (another tool brought them) gets the same message."""
    from typer.testing import CliRunner

    from tracerl import cli

    def register_with_a_missing_module(app):
        raise ModuleNotFoundError("No module named 'httptools'", name="httptools")

    parts = tuple(cli.Part(p.commands, p.extra, register_with_a_missing_module) if p.extra == "collector" else p for p in cli.PARTS)
    monkeypatch.setattr(cli, "PARTS", parts)
    result = CliRunner().invoke(cli.build_app(), ["collector", "serve", "--out", "d"])
    assert result.exit_code == 2
    assert "(httptools not installed): pip install 'tracerl[collector]'" in result.output
