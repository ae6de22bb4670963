"""Shared test fixtures: the embedded sample, the optional ../shared fixture, warehouse snapshots."""

from __future__ import annotations

import os

# Tests never talk to the real Hugging Face Hub: no telemetry ping at import time.
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("DO_NOT_TRACK", "1")

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
