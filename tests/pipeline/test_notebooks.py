"""The notebooks run from top to bottom (CI executes them here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracerl_testing.installed import require_module

nbformat = require_module("nbformat", "pip install -e '.[dev]'")
nbclient = require_module("nbclient", "pip install -e '.[dev]'")

NOTEBOOKS = sorted((Path(__file__).parents[2] / "notebooks").glob("sql_analysis*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_executes(path, tmp_path):
    notebook = nbformat.read(path, as_version=4)
    nbclient.NotebookClient(notebook, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(o.get("text", "") + str(o.get("data", {}).get("text/plain", "")) for o in outputs)
    assert "transitions;" in text and "air.tool_error" in text
