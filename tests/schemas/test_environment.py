"""Every environment variable's name is written once, in ``tracerl.schemas.environment``.

Capture is switched on by variables alone, and the loop hands its agents their endpoint and limits
the same way: a name spelled twice can drift apart, silently (an agent reading a variable the loop
never sets). The product and the example agents take names from the table (the test equipment's own
switches, such as ``TRACERL_AGL_PYTHON``, stay with it).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tracerl.schemas import environment as E

ROOT = Path(__file__).resolve().parents[2]
TABLE = ROOT / "src" / "tracerl" / "schemas" / "environment.py"
NAME = re.compile(r"^(TRACERL|OTEL|VLLM|TRACELOOP|OPENAI|RAY)_[A-Z0-9_]+$")


def spelled_names() -> list[str]:
    found = []
    for folder in ("src", "examples"):
        for file in (ROOT / folder).rglob("*.py"):
            if file == TABLE:
                continue
            for node in ast.walk(ast.parse(file.read_text())):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and NAME.match(node.value):
                    found.append(f"{file.relative_to(ROOT)}:{node.lineno}: {node.value}")
    return found


def test_no_variable_name_is_spelled_outside_the_table():
    assert spelled_names() == []


def test_the_table_names_each_variable_once():
    values = [value for name, value in vars(E).items() if name.endswith("_ENV")]
    assert len(values) == len(set(values)) > 30
    assert all(NAME.match(value) for value in values)
