"""The example's notebook runs from top to bottom on its short configuration (CI executes it here)."""

from __future__ import annotations

import pytest


@pytest.mark.slow
def test_notebook_executes(run_example_notebook):
    outputs, text = run_example_notebook("calc")
    assert "'round': 1" in text and "expression" in text and "tool_status" in text and "transitions" in text
    assert any("image/png" in o.get("data", {}) for o in outputs)  # the reward curve
