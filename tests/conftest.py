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
