"""The command line converts parameter values without pydantic where that is certain
(qkwh.cli.coercion): for every parameter of every command, the quick conversion gives what
typer's own coercion gives (value and type), or hands the value to typer (same result, same
error message)."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer.main

from qkwh.cli import app
from qkwh.cli.coercion import SLOW, QuickValue, quick

typer_coercion = pytest.importorskip("typer._coercion")


def _params():
    """(command path, click command, parameter) for every typer parameter of the app."""
    root = typer.main.get_command(app)
    todo = [("qkwh", root)]
    while todo:
        name, cmd = todo.pop()
        for p in cmd.params:
            if hasattr(p, "type_descriptor"):
                yield name, cmd, p
        for sub_name, sub in getattr(cmd, "commands", {}).items():
            todo.append((f"{name} {sub_name}", sub))


def _samples(tmp_path: Path, p) -> list:
    """Values click may hand a parameter: unset, its default, and command-line strings (a tuple
    of them for a repeatable option or a variadic argument)."""
    texts = ["0", "3", "-2", "007", "+4", " 5", "1_000", "1.5", "-0.25", "1e3", "inf", "nan"]
    texts += ["", "abc", "table", "TABLE", "csv", "parquet", "true", "no"]
    texts += [str(tmp_path), str(tmp_path / "missing.duckdb"), "~/x", "-"]
    one = [None, p.default, *texts]
    if p.multiple or p.nargs == -1:
        return [None, p.default, (), *[(t,) for t in texts], ("a", "3", str(tmp_path)), "abc"]
    return one


def _outcome(runtime, value, p, ctx):
    try:
        value = runtime.coerce(value, param=p, ctx=ctx)
    except Exception as exc:  # the error typer shows (its type and message)
        return ("error", type(exc).__name__, str(exc))
    items = value if isinstance(value, (list, tuple)) else [value]
    return ("value", repr(value), type(value), [type(v) for v in items])  # repr: nan == nan


def test_every_parameter_converts_as_typer_does(tmp_path):
    checked = quick_hits = 0
    for name, cmd, p in _params():
        ctx = cmd.make_context(name, [], resilient_parsing=True)
        ours = QuickValue(p.type_descriptor)
        theirs = typer_coercion.build_runtime_param(p.type_descriptor)
        for value in _samples(tmp_path, p):
            got = _outcome(ours, value, p, ctx)
            want = _outcome(theirs, value, p, ctx)
            assert got == want, (name, p.name, value)
            checked += 1
            if value is not None and quick(p.type_descriptor, value) is not SLOW:
                quick_hits += 1
    # the app has dozens of parameters; most sample values of them take the quick way
    assert checked > 500 and quick_hits > checked // 4, (checked, quick_hits)


def test_unusual_values_go_to_typer():
    """What the quick way cannot be sure of is left to typer (which may accept or refuse it)."""
    from typer._coercion import resolve_type_descriptor
    from typer.models import OptionInfo

    def desc(annotation, **info):
        return resolve_type_descriptor(annotation, OptionInfo(**info))

    assert quick(desc(int), "12") == 12
    assert quick(desc(int), "1_000") is SLOW and quick(desc(int), " 5") is SLOW
    assert quick(desc(float), "1e3") is SLOW and quick(desc(float), "2.5") == 2.5
    assert quick(desc(int, min=1), "3") is SLOW  # a bound: typer checks it
    assert quick(desc(Path, exists=True), "x") is SLOW
    assert quick(desc(Path), "") is SLOW
    assert quick(desc(Path), "a/b") == Path("a/b")
    assert quick(desc(list[int]), ("1", "x")) is SLOW
    assert quick(desc(list[int]), ("1", "2")) == [1, 2]
