"""The import graph of the qkwh package: no cycle, and arrows only point down.

Every module is parsed (not imported); every ``import qkwh...`` / ``from qkwh... import ...`` is
an edge, function-level (late) imports included, ``if TYPE_CHECKING:`` blocks left out (they
never run).  A ``from qkwh.pkg import name`` counts as an import of ``qkwh.pkg.name`` when that
is a module, else of ``qkwh.pkg``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import qkwh

ROOT = Path(qkwh.__file__).resolve().parent


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                skip.update(id(n) for n in ast.walk(child))
    return skip


def import_graph() -> dict[str, set[str]]:
    """module -> the qkwh modules it imports (anywhere in its body)."""
    modules = _modules()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        skip = _type_checking_nodes(tree)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")
                    up = up[: len(up) - (node.level - 1)]
                    base = ".".join(up + ([base] if base else []))
                targets = [
                    f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                    for a in node.names
                ]
            for t in targets:
                while t and t not in modules:  # `import qkwh.a.b` of a name inside a module
                    t = t.rpartition(".")[0]
                if t.startswith("qkwh") and t != name:
                    graph[name].add(t)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a list of modules (first == last), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph.get(m, ())):
            if state.get(n) == 1:
                return stack[stack.index(n) :] + [n]
            if n not in state:
                found = visit(n)
                if found:
                    return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state:
            found = visit(m)
            if found:
                return found
    return None


def _reaches(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for n in graph.get(todo.pop(), ()):
            if n not in seen:
                seen.add(n)
                todo.append(n)
    return seen


def _under(modules, prefix: str) -> bool:
    return any(m == prefix or m.startswith(prefix + ".") for m in modules)


def test_the_graph_sees_late_imports():
    """The parser finds imports inside functions (a test that missed them would pass vacuously)."""
    graph = import_graph()
    assert "qkwh.store" in graph["qkwh.cli.catalog"]  # imported inside the command functions
    assert "qkwh.analyses.stats" in graph["qkwh.analyses.precompute"]  # inside the builders
    cyclic = {"a": {"b"}, "b": {"c"}, "c": {"a"}}
    assert find_cycle(cyclic) == ["a", "b", "c", "a"]


def test_no_import_cycle():
    assert find_cycle(import_graph()) is None


def test_layers():
    graph = import_graph()
    # the store knows tables, not compute (nor the CLI)
    store = _reaches(graph, "qkwh.store")
    assert not _under(store, "qkwh.compute") and "qkwh.cli" not in store, sorted(store)
    # analyses (declarations and registry included) know no compute, store, CLI, reports, dbt
    for m in graph:
        if m.startswith("qkwh.analyses"):
            bad = {
                n
                for n in _reaches(graph, m)
                if n.startswith(
                    (
                        "qkwh.compute",
                        "qkwh.store",
                        "qkwh.cli",
                        "qkwh.reports",
                        "qkwh.build",
                        "qkwh.udf",
                        "qkwh.sniffed",
                    )
                )
            }
            assert not bad, (m, sorted(bad))
    # the declarations are data: they import nothing of qkwh but the declaration classes and
    # each other (rope's band metrics reuse plasticity's estimator list)
    for m in graph:
        if m.startswith("qkwh.analyses.declared"):
            assert all(
                x == "qkwh.analyses.declaration" or x.startswith("qkwh.analyses.declared")
                for x in graph[m]
            ), (m, graph[m])
    # the parameters do not import compute
    assert not _under(_reaches(graph, "qkwh.params"), "qkwh.compute")
    # the sniffed reader and its remote opener do not import each other
    assert "qkwh.sniffed.remote" not in _reaches(graph, "qkwh.sniffed.reader")
    # nothing outside the CLI package imports it (``python -m qkwh`` aside)
    outside = [m for m in graph if not _under([m], "qkwh.cli") and m != "qkwh.__main__"]
    assert [m for m in outside if _under(graph[m], "qkwh.cli")] == []


def test_one_module_per_name():
    """No two modules share a last name component that confuses readers (registry)."""
    names = [m.rsplit(".", 1)[-1] for m in _modules()]
    assert names.count("registry") == 1
