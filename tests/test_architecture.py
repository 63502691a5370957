"""The package's plan, held by tests: data flows one way, so no module of fusecheck/ imports (at its top or
inside a function) a module that imports it back, directly or through others."""
import ast
from pathlib import Path

import networkx as nx

PACKAGE = Path(__file__).resolve().parents[1] / "fusecheck"


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def import_graph() -> nx.DiGraph:
    """module -> the fusecheck modules it imports. `from pkg import name` is an edge to pkg.name when that
    is a module, else to pkg (whose __init__ then runs)."""
    modules, graph = _modules(), nx.DiGraph()
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        graph.add_node(name)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([node.module] if node.module else []))
                subs = [f"{base}.{a.name}" for a in node.names]
                targets = subs + ([] if all(t in modules for t in subs) else [base])
            else:
                continue
            graph.add_edges_from((name, t) for t in targets if t in modules and t != name)
    return graph


def test_no_import_cycle_in_the_package():
    cycles = [sorted(c) for c in nx.strongly_connected_components(import_graph()) if len(c) > 1]
    assert cycles == []


def test_the_import_graph_sees_imports_inside_functions():
    # the detector itself: a lazy import is an edge too (tests would pass vacuously otherwise)
    graph = import_graph()
    assert graph.has_edge("fusecheck.cli.dist", "fusecheck.distributed.cli")  # `run` imports it lazily
    assert graph.has_edge("fusecheck.compare.metrics", "fusecheck.compare.cores")


def test_the_case_a_builder_returns_is_importable_from_the_package():
    from fusecheck import Case
    from fusecheck.case import Case as Defined
    assert Case is Defined
