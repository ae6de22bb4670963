"""Names: capture does not reach the analyses (the RoPE facts it records live in
``qkwh.rope_config``, which both import), and ``qkwh.rope_sources`` imports no private name of
another qkwh module."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import qkwh

ROOT = Path(qkwh.__file__).resolve().parent


def _graph():
    spec = importlib.util.spec_from_file_location(
        "_import_graph", Path(__file__).resolve().parents[1] / "test_import_graph.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.import_graph()


def _reach(graph, start):
    """Modules reachable from ``start``; the package itself (``from qkwh import __version__``)
    is not followed: its ``qkwh.open`` imports the warehouse only when called."""
    seen, todo = set(), [start]
    while todo:
        for n in graph.get(todo.pop(), ()):
            if n not in seen and n != "qkwh":
                seen.add(n)
                todo.append(n)
    return seen


def test_capture_does_not_import_the_analyses():
    graph = _graph()
    capture = [m for m in graph if m == "qkwh.capture" or m.startswith("qkwh.capture.")]
    assert "qkwh.capture.model" in capture
    assert "qkwh.rope_config" in _reach(graph, "qkwh.capture.model")  # the test can see it
    for m in capture:
        bad = sorted(n for n in _reach(graph, m) if n.startswith("qkwh.analyses"))
        assert not bad, (m, bad)


def test_rope_sources_imports_no_private_name():
    tree = ast.parse((ROOT / "rope_sources.py").read_text())
    private = [
        (node.module, a.name)
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("qkwh")
        for a in node.names
        if a.name.startswith("_")
    ]
    imported = [
        node.module
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("qkwh")
    ]
    assert "qkwh.sniffed.hub" in imported and private == []
