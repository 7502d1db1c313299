"""Every environment variable's name is written once, in ``tracerl.schemas.environment``.

Capture is switched on by variables alone, and the loop hands its agents their endpoint and limits
the same way: a name spelled twice can drift apart, silently (an agent reading a variable the loop
never sets). The product and the example agents take names from the table, whoever owns the
variable (tracerl, OTel, torch's launchers, a tracker): a string at a place that reads or sets the
environment is a name spelled outside it, whatever its prefix (the test equipment's own switches,
such as ``TRACERL_AGL_PYTHON``, stay with it).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

from tracerl.schemas import environment as E

ROOT = Path(__file__).resolve().parents[2]
TABLE = ROOT / "src" / "tracerl" / "schemas" / "environment.py"
TABLE_NAMES = {value for name, value in vars(E).items() if name.endswith("_ENV")}
OURS = re.compile(r"^(TRACERL|OTEL|VLLM|TRACELOOP|OPENAI|RAY)_[A-Z0-9_]+$")  # a name of ours, wherever it is spelled
VARIABLE = re.compile(r"^[A-Z][A-Z0-9_]*$")
# what holds an environment: os.environ, and any name or argument called env, environ, environment, extra_env...
ENVIRONMENT = re.compile(r"(^|_)(env|environ|environment)$", re.IGNORECASE)


def _is_environment(node: ast.AST) -> bool:
    if isinstance(node, ast.Attribute):
        return bool(ENVIRONMENT.search(node.attr))
    return isinstance(node, ast.Name) and bool(ENVIRONMENT.search(node.id))


def _keys(mapping: ast.AST) -> list[ast.AST]:
    return [key for key in mapping.keys if key is not None] if isinstance(mapping, ast.Dict) else []


def names_at_environment(tree: ast.AST) -> Iterator[ast.AST]:
    """What names a variable where the environment is read or set: ``env[X]``, ``X in env``,
    ``env.get/setdefault/pop(X)``, ``env.update({X: ...})``, ``os.getenv(X)`` (and ``getter(X)`` where
    ``getter = os.environ.get`` is named like an environment), ``{**os.environ, X: ...}``, ``env = {X: ...}``
    and a call's ``env={X: ...}``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and _is_environment(node.value):
            yield node.slice
        elif isinstance(node, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops):
            if any(_is_environment(c) for c in node.comparators):
                yield node.left
        elif isinstance(node, ast.Call):
            call = node.func
            if isinstance(call, ast.Attribute) and _is_environment(call.value):
                if call.attr in {"get", "setdefault", "pop"} and node.args:
                    yield node.args[0]
                elif call.attr == "update":
                    yield from (key for arg in node.args for key in _keys(arg))
            elif (isinstance(call, ast.Attribute) and call.attr in {"getenv", "putenv", "unsetenv"}) or (
                    isinstance(call, ast.Name) and (call.id == "getenv" or ENVIRONMENT.search(call.id))):
                yield from node.args[:1]
            yield from (key for kw in node.keywords if kw.arg and ENVIRONMENT.search(kw.arg) for key in _keys(kw.value))
        elif isinstance(node, ast.Dict) and any(k is None and _is_environment(v) for k, v in zip(node.keys, node.values)):
            yield from _keys(node)
        elif isinstance(node, ast.Assign) and any(_is_environment(t) for t in node.targets):
            yield from _keys(node.value)


def spelled_names(source: str) -> list[tuple[int, str]]:
    """(line, name) of each variable name a module spells instead of taking it from the table: any string
    where the environment is read or set, and anywhere a table name or a name of ours as a whole string."""
    tree = ast.parse(source)
    at_environment = {id(node) for node in names_at_environment(tree)}
    return sorted(
        (node.lineno, node.value) for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        and (id(node) in at_environment or node.value in TABLE_NAMES or OURS.match(node.value))
    )


def test_no_variable_name_is_spelled_outside_the_table():
    found = [f"{file.relative_to(ROOT)}:{line}: {name}"
             for folder in ("src", "examples") for file in sorted((ROOT / folder).rglob("*.py")) if file != TABLE
             for line, name in spelled_names(file.read_text())]
    assert found == [], "take these names from tracerl.schemas.environment (add a row there for a new one)"


def test_a_name_is_found_wherever_the_environment_is_read_or_set_whatever_its_prefix():
    source = '''
import os, subprocess
os.environ["A"]; os.environ.get("B"); os.getenv("C"); os.environ.setdefault("D", "1"); "E" in os.environ
env = {**os.environ, "F": "1"}; env.update({"G": "1"}); env["H"] = "1"
subprocess.run(["x"], env={"I": "1"}); getenv = os.environ.get; getenv("J")
launch_env = {"K": "1"}
os.environ.get(E.RANK_ENV); {"L": "not an environment"}["L"]; "RANK"; "TRACERL_NEW"
'''
    names = [name for _, name in spelled_names(source)]
    assert names == [*"ABCDEFGHIJK", "RANK", "TRACERL_NEW"]


def test_the_table_names_each_variable_once():
    values = [value for name, value in vars(E).items() if name.endswith("_ENV")]
    assert len(values) == len(set(values)) > 30
    assert all(VARIABLE.match(value) for value in values)
