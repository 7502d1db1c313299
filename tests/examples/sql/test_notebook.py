"""The example's notebook runs from top to bottom on its short configuration (CI executes it here)."""

from __future__ import annotations

import pytest


@pytest.mark.slow
def test_notebook_executes(run_example_notebook):
    outputs, text = run_example_notebook("sql")
    assert "'round': 1" in text and "writer: SELECT" in text and "checker: " in text
    trained = text.split("mean_response_tokens")[-1]
    assert "writer" in trained and "checker" not in trained  # the checker's calls are never transitions
    assert any("image/png" in o.get("data", {}) for o in outputs)  # the reward curve
