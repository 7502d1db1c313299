"""The example's notebook runs from top to bottom on its short configuration (CI executes it here)."""

from __future__ import annotations

from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.slow
def test_notebook_executes(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACERL_CACHE_DIR", str(tmp_path / "cache"))  # the kernel inherits it: a fresh warm start
    notebook = nbformat.read(REPO / "examples" / "calc" / "notebook.ipynb", as_version=4)
    # run from the repository root, as a user opens it: `examples` is importable and `python -m examples.calc.agent` starts
    nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(REPO)}}).execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(o.get("text", "") + str(o.get("data", {}).get("text/plain", "")) for o in outputs)
    assert "'round': 1" in text and "expression" in text and "tool_status" in text and "transitions" in text
    assert any("image/png" in o.get("data", {}) for o in outputs)  # the reward curve
