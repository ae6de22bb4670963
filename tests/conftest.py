"""Shared test fixtures: the embedded sample, the optional ../shared fixture, warehouse snapshots."""

from __future__ import annotations

import os

# Tests never talk to the real Hugging Face Hub: no telemetry ping at import time.
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("DO_NOT_TRACK", "1")

# In a parallel run (pytest-xdist: `make test-fast`, `make test`) every worker already has a core
# of its own: one BLAS/OpenMP thread each (set before numpy is first imported, inherited by the
# subprocesses the tests start), or the workers' spinning BLAS threads fight over the cores.
if os.environ.get("PYTEST_XDIST_WORKER"):
    for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_var, "1")

import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "warehouse" / "sample" / "smollm2-135m"
SHARED_FIXTURE = (REPO / ".." / "shared" / "fixtures" / "smollm2-135m").resolve()
SHARED_REASON = "../shared fixture absent (only in CI/dev checkouts)"


@pytest.fixture
def sample_copy(tmp_path: Path) -> Path:
    """A writable copy of the embedded sample, named like the registry's model id."""
    dst = tmp_path / "smollm2-135m"
    shutil.copytree(SAMPLE, dst)
    for p in dst.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    return dst


@pytest.fixture
def shared_fixture() -> Path:
    if not SHARED_FIXTURE.is_dir():
        pytest.skip(SHARED_REASON)
    return SHARED_FIXTURE


def snapshot(db: Path) -> dict[str, list[tuple]]:
    """Every row of every base table, sorted: equal snapshots mean an unchanged warehouse."""
    import duckdb

    con = duckdb.connect(str(db), read_only=True)
    try:
        tables = [
            r[0]
            for r in con.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema='main' "
                "AND table_type='BASE TABLE' ORDER BY 1"
            ).fetchall()
        ]
        return {
            t: sorted(map(repr, con.execute(f'SELECT * FROM "{t}"').fetchall())) for t in tables
        }
    finally:
        con.close()


#: a small synthetic model (2 layers x 2 query heads, 1 KV head, d = 16, 300 rows per file): quick
#: to ingest and compute, for the CLI tests that need some warehouse
SMALL_SYNTH = (
    "--layers",
    "2",
    "--q-heads",
    "2",
    "--kv-heads",
    "1",
    "--head-dim",
    "16",
    "--rows",
    "300",
)


def small_synth_args(data: Path) -> list[str]:
    """The `qkwh synth` arguments that write :data:`SMALL_SYNTH` into ``data``."""
    return ["synth", str(data), *SMALL_SYNTH]


def synth_args(
    out: Path,
    *,
    layers: int = 2,
    q_heads: int = 2,
    kv_heads: int = 1,
    head_dim: int = 16,
    rows: int = 300,
    seed: int | None = None,
    knobs: dict[str, object] | None = None,
) -> list[str]:
    """The `qkwh synth` arguments of a small synthetic model written to ``out`` (the defaults are
    :data:`SMALL_SYNTH`); ``knobs`` become ``--set NAME=VALUE``."""
    args = ["synth", str(out), "--layers", str(layers), "--q-heads", str(q_heads)]
    args += ["--kv-heads", str(kv_heads), "--head-dim", str(head_dim), "--rows", str(rows)]
    if seed is not None:
        args += ["--seed", str(seed)]
    for name, value in (knobs or {}).items():
        args += ["--set", f"{name}={value}"]
    return args


def qkwh_cli(*args: str, input: str | None = None):
    """Run the qkwh command line in-process (typer's CliRunner, stdout and stderr apart) and
    return the click Result."""
    from typer.testing import CliRunner

    from qkwh.cli import app

    return CliRunner().invoke(app, list(args), input=input, terminal_width=200)


def qkwh_ok(*args: str, input: str | None = None):
    """:func:`qkwh_cli` that asserts exit code 0 (showing what was printed otherwise)."""
    r = qkwh_cli(*args, input=input)
    assert r.exit_code == 0, (args, r.output + r.stderr)
    return r


@pytest.fixture
def cli():
    """The qkwh command line in-process: ``cli(*args)`` returns the Result, ``cli.ok(*args)``
    asserts exit code 0 (module-scoped fixtures use :func:`qkwh_cli` / :func:`qkwh_ok`)."""

    class _Cli:
        def __call__(self, *args: str, input: str | None = None):
            return qkwh_cli(*args, input=input)

        ok = staticmethod(qkwh_ok)

    return _Cli()


# ------------------------------------------------------------------------------------------
# parallel runs (pytest-xdist with --dist loadgroup: `make test`, `make test-fast`)
# ------------------------------------------------------------------------------------------
#
# Tests that share a module- or session-scoped fixture of the suite (a dbt build, a computed
# warehouse, a rendered report) run in one worker, so that each such fixture is set up once
# rather than once per worker; every other test goes to whichever worker is free.  Each worker
# writes the groups it collected to a file the controller named; the controller's scheduler reads
# it.  (xdist's own loadgroup carries a group in the test's node id, which pytest 9.2 no longer
# lets a plugin change: its groups would be silently ignored.)

TESTS = Path(__file__).resolve().parent

#: module- or session-scoped fixtures that cost next to nothing (a folder name, six documents):
#: they do not tie their tests to one worker
CHEAP_FIXTURES = {"dbt/conftest.py::build_root", "capture/conftest.py::docs"}

_TERMINAL_VARS = ("COLUMNS", "LINES")
_GROUPS_FILE = pytest.StashKey[Path]()


def _shared_fixtures(item: pytest.Item) -> list[str]:
    """The module- and session-scoped fixtures defined under tests/ that ``item`` uses (directly
    or through other fixtures), as ``file::name``; autouse ones (settings such as a thread limit)
    and :data:`CHEAP_FIXTURES` left out."""
    import inspect

    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return []
    autouse = set(info.initialnames) - set(info.argnames)
    names = []
    for name in info.names_closure:
        if name in autouse:
            continue
        for fd in info.name2fixturedefs.get(name, ()):
            if fd.scope == "function":
                continue
            try:
                src = Path(inspect.getfile(fd.func)).resolve()
            except TypeError:
                continue
            if not src.is_relative_to(TESTS):
                continue  # pytest's own (tmp_path_factory, ...) and plugins'
            key = f"{src.relative_to(TESTS).as_posix()}::{name}"
            if key not in CHEAP_FIXTURES:
                names.append(key)
    return names


def fixture_groups(items: list[pytest.Item]) -> dict[str, str]:
    """{node id: group} for the tests that use a shared fixture (see :func:`_shared_fixtures`);
    tests linked through several such fixtures share one group, named after the smallest."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    used = {item.nodeid: _shared_fixtures(item) for item in items}
    for names in used.values():
        for other in names[1:]:
            a, b = find(names[0]), find(other)
            if a != b:
                parent[max(a, b)] = min(a, b)
    return {nodeid: find(names[0]) for nodeid, names in used.items() if names}


def _loadgroup(config: pytest.Config) -> bool:
    return config.pluginmanager.hasplugin("xdist") and config.getoption("dist") == "loadgroup"


def pytest_configure(config: pytest.Config) -> None:
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        # (a worker) the run's own COLUMNS and LINES (see pytest_configure_node), so that the
        # command line's width in the tests is the same as in a run without workers
        for name, value in workerinput.get("terminal_vars", {}).items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        if "groups_file" in workerinput:
            config.stash[_GROUPS_FILE] = Path(workerinput["groups_file"])
    elif _loadgroup(config):
        import tempfile

        config.stash[_GROUPS_FILE] = Path(tempfile.mkdtemp(prefix="qkwh-groups-")) / "groups.json"


def pytest_unconfigure(config: pytest.Config) -> None:
    groups_file = config.stash.get(_GROUPS_FILE, None)
    if groups_file is not None and getattr(config, "workerinput", None) is None:
        shutil.rmtree(groups_file.parent, ignore_errors=True)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """(xdist, in the controller) Hand each worker the terminal size variables of the run's own
    environment (a worker inherits the process-level environment, where importing readline, as
    pdb does, has set COLUMNS=80 and LINES=24 behind ``os.environ``'s back) and the file for its
    groups."""
    node.workerinput["terminal_vars"] = {k: os.environ.get(k) for k in _TERMINAL_VARS}
    groups_file = node.config.stash.get(_GROUPS_FILE, None)
    if groups_file is not None:
        node.workerinput["groups_file"] = str(groups_file)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """(a worker of a loadgroup run) Write {node id: group} for the controller's scheduler.
    Every worker collects the same tests, so any of them may write the file (atomically)."""
    groups_file = config.stash.get(_GROUPS_FILE, None)
    if groups_file is None or getattr(config, "workerinput", None) is None:
        return
    import json

    tmp = groups_file.with_name(f"{groups_file.name}.{os.getpid()}")
    tmp.write_text(json.dumps(fixture_groups(items)))
    os.replace(tmp, groups_file)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """(xdist, in the controller) For --dist loadgroup: xdist's scheduling by scope, where a
    scope is a group of tests sharing a fixture or else a single test."""
    groups_file = config.stash.get(_GROUPS_FILE, None)
    if groups_file is None:
        return None
    import json

    from xdist.scheduler import LoadScopeScheduling

    class SharedFixtureScheduling(LoadScopeScheduling):
        _groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self._groups is None and groups_file.exists():
                # read once all workers have collected (schedule() runs after that)
                self._groups = json.loads(groups_file.read_text())
            group = (self._groups or {}).get(nodeid)
            return f"group:{group}" if group else nodeid

    return SharedFixtureScheduling(config, log)
