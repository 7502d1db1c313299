"""The parts form layers you can draw: no import cycle, hidden in a function body or not, the
top (the CLI, orchestration) imported by nothing below it, and the ground floor (``tracerl.core``)
importing nothing above it.

The graph is read from the source (every ``import`` statement, wherever it stands), not from
what one run happens to import, so a cycle that only shows on a rare path fails here too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

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
