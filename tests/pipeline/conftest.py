"""Shared fixtures; the span builders live in pipeline_spans.py (named uniquely: tests use importlib mode)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"
