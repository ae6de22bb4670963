"""What the command line imports before it does any work: the heavy libraries are imported where
they are used, never at start-up.  `qkwh --help` (every command's help) loads no numpy, DuckDB,
pyarrow, pydantic, dbt, Jinja, Altair, SciPy or torch; a `qkwh compute` with nothing to do loads
DuckDB but no numpy, pyarrow, pydantic or any of the others.  Checked in a fresh interpreter
(this test process has imported them all), as a fact about modules, not a timing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import typer.main

from qkwh.cli import app
from tests.conftest import qkwh_ok as ok
from tests.conftest import synth_args

REPO = Path(__file__).resolve().parents[2]

#: imported by no `--help`
HEAVY = ("numpy", "duckdb", "pyarrow", "pydantic", "dbt", "jinja2", "altair", "scipy", "torch")
HEAVY += ("markdown_it", "pygments")  # rich.markdown and rich.traceback (qkwh.cli.deferred)
#: a compute with nothing to do opens the warehouse (DuckDB), and loads none of these
NOT_FOR_NOTHING = (*(m for m in HEAVY if m != "duckdb"), "ray")

#: runs the CLI on each argument list given as JSON in argv[1] (in this interpreter, one after
#: the other), then prints the top-level modules loaded and the exit codes as JSON
_PROBE = """
import json, sys
from qkwh.cli import app
codes = []
for args in json.loads(sys.argv[1]):
    try:
        app(args, prog_name="qkwh")
        codes.append(None)
    except SystemExit as exc:
        codes.append(exc.code)
print("\\n" + json.dumps({"modules": sorted({m.split(".")[0] for m in sys.modules}), "codes": codes}))
"""


def _probe(*runs: list[str], cwd: Path) -> dict:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    env.pop("QKWH_WAREHOUSE", None)
    r = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(list(runs))],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    printed, _, last = r.stdout.rstrip().rpartition("\n")
    return {**json.loads(last), "stdout": printed}


def _command_paths() -> list[list[str]]:
    """[] (the app) and every command and subcommand, as argument lists."""
    paths, todo = [], [([], typer.main.get_command(app))]
    while todo:
        path, cmd = todo.pop()
        paths.append(path)
        todo += [([*path, n], c) for n, c in getattr(cmd, "commands", {}).items()]
    return paths


def test_help_of_every_command_imports_no_heavy_library(tmp_path):
    paths = _command_paths()
    assert ["compute"] in paths and ["runs", "diff"] in paths and len(paths) > 15
    got = _probe(*[[*p, "--help"] for p in paths], cwd=tmp_path)
    assert got["codes"] == [0] * len(paths)
    # the probe sees what is loaded: the command line's own modules are
    assert {"qkwh", "typer", "rich"} <= set(got["modules"])
    assert sorted(set(HEAVY) & set(got["modules"])) == []


def test_a_compute_with_nothing_to_do_imports_no_numpy(tmp_path):
    data, db = tmp_path / "synth-s", tmp_path / "wh.duckdb"
    ok(*synth_args(str(data), seed=3))
    ok("ingest", str(data), "--model-id", "synth-s", "-w", str(db))
    # pca and reach (a default analysis that reads the capture's sampler facts) keep it short
    ok("compute", "-w", str(db), "-j", "1", "-a", "pca,reach")
    got = _probe(["compute", "-w", str(db), "-j", "1", "-a", "pca,reach"], cwd=tmp_path)
    assert got["codes"] == [0] and "computed 0 head(s)" in got["stdout"], got["stdout"]
    assert "duckdb" in got["modules"]  # it did open the warehouse
    assert sorted(set(NOT_FOR_NOTHING) & set(got["modules"])) == []
    # and it did nothing: a changed parameter is real work, which loads numpy in the workers'
    # module (computed in-process with -j 1)
    again = _probe(["compute", "-w", str(db), "-j", "1", "-a", "pca", "-p", "seed=7"], cwd=tmp_path)
    assert again["codes"] == [0] and "numpy" in again["modules"]
    assert "computed 4 head(s)" in again["stdout"], again["stdout"]


def test_synth_help_reads_the_knobs_the_generator_has():
    """`qkwh synth --help` lists the knobs and defaults read from the generator's source (not
    imported): the same as qkwh.synth's own table and signatures."""
    from qkwh.cli.capture import _knobs_from_source
    from qkwh.synth import SYNTH_KNOBS, knob_defaults

    found = _knobs_from_source()
    assert found is not None
    knobs, defaults = found
    assert knobs == SYNTH_KNOBS
    assert list(defaults.items()) == list(knob_defaults().items())


_DEFERRED_PROBE = """
import io, sys
import qkwh.cli
import rich.markdown, rich.traceback
from rich.console import Console
from rich.markdown import Markdown as StandIn  # what typer's help module holds

stand_ins = [type(sys.modules[m]).__name__ for m in ("rich.markdown", "rich.traceback")]
console = Console(file=io.StringIO(), width=60)
console.print(rich.markdown.Markdown("# Title\\n\\nsome *text*"))
try:
    1 / 0
except ZeroDivisionError:
    console.print_exception()
from rich.markdown import Heading
real = [type(sys.modules[m]).__name__ for m in ("rich.markdown", "rich.traceback")]
print(stand_ins, real, "Title" in console.file.getvalue(), "ZeroDivisionError" in console.file.getvalue(),
      Heading.__module__, isinstance(rich.markdown.Markdown("x"), StandIn))
"""


def test_the_deferred_rich_modules_work_when_used():
    """qkwh.cli puts stand-ins for rich.markdown and rich.traceback (typer's help imports them,
    qkwh never uses them); using them imports the real modules, which then work as ever."""
    r = subprocess.run(
        [sys.executable, "-c", _DEFERRED_PROBE], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [
        "['_StandInModule',",
        "'_StandInModule']",
        "['module',",
        "'module']",
        "True",
        "True",
        "rich.markdown",
        "True",
    ], r.stdout
