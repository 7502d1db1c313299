"""Every package folder ships: the folders are mapped onto ``tracerl.*`` by hand in pyproject.toml,
so a new sub-package that is not listed works in an editable install and is missing from a wheel."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_folder_with_an_init_is_a_listed_package():
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    found = set()
    for package, folder in setuptools["package-dir"].items():
        for init in (ROOT / folder).rglob("__init__.py"):
            relative = init.parent.relative_to(ROOT / folder)
            found.add(".".join([package, *relative.parts]))
    assert found - listed == set(), "add these to [tool.setuptools] packages in pyproject.toml"
    assert listed - found == set(), "listed packages without a folder"


def test_every_module_an_extra_names_is_installed_by_the_full_install():
    from tracerl.extras import EXTRAS, missing_modules

    assert {extra: missing_modules(extra) for extra in EXTRAS} == {extra: [] for extra in EXTRAS}


def test_a_part_whose_extra_is_missing_keeps_its_commands_and_says_what_to_install(monkeypatch):
    from typer.testing import CliRunner

    from tracerl import cli, extras

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
