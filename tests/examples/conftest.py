"""Fixtures the example tests share."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def run_example_notebook(tmp_path, monkeypatch) -> Callable[[str], tuple[list[dict], str]]:
    """``run_example_notebook("sql")`` executes ``examples/sql/notebook.ipynb`` top to bottom and returns
    its code cells' outputs (none of them an error) and their text.

    It runs from the repository root, as a user opens it (``examples`` importable, ``python -m
    examples.NAME.agent`` starts), with a cache folder of its own: the kernel inherits it, so the
    warm start is built fresh."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    monkeypatch.setenv("TRACERL_CACHE_DIR", str(tmp_path / "cache"))

    def run(example: str) -> tuple[list[dict], str]:
        notebook = nbformat.read(REPO / "examples" / example / "notebook.ipynb", as_version=4)
        nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(REPO)}}).execute()
        outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
        assert not [o for o in outputs if o.output_type == "error"]
        return outputs, "".join(o.get("text", "") + str(o.get("data", {}).get("text/plain", "")) for o in outputs)

    return run
