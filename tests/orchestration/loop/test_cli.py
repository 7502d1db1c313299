"""The loop's command line (``tracerl demo``, ``python -m examples.X.train``): options that cannot run
together are refused before anything is built, naming the option to change."""

from __future__ import annotations

from typer.testing import CliRunner

from tracerl.cli import app


def test_lora_rounds_on_the_built_in_server_are_refused_at_once(tmp_path):
    result = CliRunner().invoke(app, ["demo", "--out", str(tmp_path / "run"), "--lora-rank", "8"], env={"COLUMNS": "300"})
    assert result.exit_code == 2
    assert "use --server vllm" in result.output and "--server" in result.output
    assert not (tmp_path / "run" / "policy").exists()  # nothing trained, nothing written beyond the run folder


def test_an_unknown_server_is_named(tmp_path):
    result = CliRunner().invoke(app, ["demo", "--out", str(tmp_path / "run"), "--server", "triton"], env={"COLUMNS": "300"})
    assert result.exit_code == 2 and "'triton' is not one of tracerl, vllm" in result.output
