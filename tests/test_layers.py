"""The parts form layers you can draw: no import cycle, hidden in a function body or not, the
top (the CLI, orchestration) imported by nothing below it, and the ground floor (``tracerl.core``)
importing nothing above it.

The graph is read from the source (every ``import`` statement, wherever it stands), not from
what one run happens to import, so a cycle that only shows on a rare path fails here too.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import networkx as nx
import pytest

from tracerl_testing.installed import require

ROOT = Path(__file__).resolve().parents[1]


def product_modules() -> dict[str, Path]:
    """Every module of the product distribution, by its import name (src layout: the name is the path)."""
    source = ROOT / "src"
    modules = {}
    for file in (source / "tracerl").rglob("*.py"):
        parts = file.relative_to(source).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = file
    return modules


def import_graph() -> nx.DiGraph:
    """module -> the product modules it imports (``from P import name`` counts as P.name when that is a module)."""
    modules = product_modules()
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    for name, file in modules.items():
        for node in ast.walk(ast.parse(file.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            graph.add_edges_from((name, t) for t in targets if t in modules and t != name)
    return graph


def test_no_module_imports_itself_back_through_others():
    assert list(nx.simple_cycles(import_graph())) == []


def test_the_cli_and_orchestration_are_imported_by_nothing_below_them():
    graph = import_graph()
    top = ("tracerl.cli", "tracerl.orchestration")
    below = [(a, b) for a, b in graph.edges if b.startswith(top) and not a.startswith(top) and a != "tracerl.__main__"]
    assert below == []


def test_schemas_import_no_other_part():
    """Attribute names and table schemas are what every part shares; they depend on none of them."""
    graph = import_graph()
    leaks = [(a, b) for a, b in graph.edges if a.startswith("tracerl.schemas") and not b.startswith(("tracerl.schemas", "tracerl.core.lazy"))]
    assert leaks == []


def test_the_ground_floor_imports_no_part():
    """Storage, loopback servers, chat templates, lazy imports: what every part builds on needs none of them."""
    graph = import_graph()
    leaks = [(a, b) for a, b in graph.edges if a.startswith("tracerl.core") and not b.startswith("tracerl.core")]
    assert leaks == []


def test_every_module_of_the_product_lives_in_a_part_or_the_ground_floor():
    """Nothing but the CLI (and the public API agents call) at the top of the package."""
    top = {name for name in product_modules() if name.count(".") == 1}
    parts = {"tracerl.core", "tracerl.instrumentation", "tracerl.collector", "tracerl.pipeline", "tracerl.trainer",
             "tracerl.orchestration", "tracerl.schemas"}
    assert top - parts == {"tracerl.cli", "tracerl.__main__"}


# ---- what one process loads, at run time -------------------------------------------------------
# The graph above is read from the source; these import modules in a fresh interpreter and read
# ``sys.modules``, so they also see what the graph cannot: a module imported by a name built at run time
# (``importlib``, a lazy attribute read at module level) and the third-party packages that come along.

LOADED = """
import importlib, json, pkgutil, sys
missing = []
for name in sys.argv[1:]:
    names = [name]
    if name.endswith(".*"):  # every module of a part
        package = importlib.import_module(name[:-2])
        names = [m.name for m in pkgutil.walk_packages(package.__path__, package.__name__ + ".")]
    for module in names:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as error:  # an extra not installed here; a broken tracerl module still fails
            if (error.name or "").startswith("tracerl"):
                raise
            missing.append(f"{module}: {error.name}")
print(json.dumps({"modules": sorted(sys.modules), "missing": missing}))
"""


def loaded_modules(*names: str) -> tuple[set[str], list[str]]:
    """The modules a fresh interpreter holds after importing ``names`` (``P.*``: every module of package P),
    run from the repository root as the examples' agents are; and the imports skipped for an extra not installed."""
    done = subprocess.run([sys.executable, "-c", LOADED, *names], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.splitlines()[-1])
    return set(result["modules"]), result["missing"]


# What an agent's process must not load: the install it runs on is capture only (`pip install tracerl`),
# and the parts below are other extras (README "Install by role"), loaded for nothing in every episode.
NOT_IN_AN_AGENT = ("duckdb", "torch", "transformers", "tracerl.pipeline", "tracerl.trainer", "tracerl.orchestration",
                   "tracerl.collector")


def within(module: str, packages: tuple[str, ...]) -> bool:
    """Whether ``module`` is one of ``packages`` or inside one (``torch.nn`` is in torch, ``torchvision`` is not)."""
    return any(module == package or module.startswith(f"{package}.") for package in packages)


@pytest.mark.parametrize(("agent", "own"), [
    pytest.param("examples.calc.agent", (), marks=pytest.mark.frameworks),
    pytest.param("examples.sql.agent", (), marks=pytest.mark.frameworks),
    # its search index is a DuckDB file (examples/rag/bm25.py): the agent's own dependency, not tracerl's
    pytest.param("examples.rag.agent", ("duckdb",), marks=pytest.mark.frameworks),
    pytest.param("examples.bfcl.agent", ()),
    # `tracerl demo`'s agent lives in its package (run as `python -m tracerl.orchestration.demo.agent`): itself and its
    # task module, and so the package __init__s above them (docstrings only); nothing else of orchestration
    pytest.param("tracerl.orchestration.demo.agent", ("tracerl.orchestration.demo.agent", "tracerl.orchestration.demo.task")),
])
def test_an_agent_process_loads_capture_only(agent, own):
    """An agent program reads the loop's model names from ``tracerl.instrumentation.agent_env``: importing them
    from the loop's recipe module loaded 23 pipeline modules and DuckDB into every agent process (issue 49).

    ``own``: packages the agent itself uses, allowed with the packages they sit in."""
    modules, missing = loaded_modules(agent)
    if missing:
        require(False, missing[0].split(": ")[1], "pip install -e '.[frameworks]'")
    parents = {".".join(name.split(".")[:i]) for name in own for i in range(1, name.count(".") + 1)}
    assert sorted(m for m in modules if within(m, NOT_IN_AN_AGENT) and not within(m, own) and m not in parents) == []


@pytest.mark.parametrize("part", ["tracerl.instrumentation", "tracerl.collector", "tracerl.pipeline", "tracerl.trainer"])
def test_no_part_below_orchestration_loads_it(part):
    """Every module of ``part`` imported at once: orchestration (the top) comes along with none."""
    modules, _ = loaded_modules(part, f"{part}.*")
    assert sorted(m for m in modules if within(m, ("tracerl.orchestration",))) == []
