"""`qkwh build` from dbt's structured events: progress by kind, waiting for a warehouse another
process holds as dbt opens it, and refusing to build while a compute runs.

One real build of an empty warehouse (every model, data test and unit test of the project) runs
while a reader process holds the file at the moment dbt opens it; the reader lets go when the
build reports that it waits, so the test depends on no timing.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import duckdb
import pytest

from qkwh import build as qbuild
from qkwh import store
from qkwh.build import BuildProgress, build
from qkwh.errors import WarehouseLockedError

#: holds the warehouse read-only from "go" on stdin until "release" (or stdin closes)
READER = """
import sys, duckdb
sys.stdin.readline()
con = duckdb.connect(sys.argv[1], read_only=True)
print("held", flush=True)
sys.stdin.readline()
con.close()
print("released", flush=True)
"""


class Reader:
    """A process that takes the warehouse's lock when told and lets go when told."""

    def __init__(self, warehouse: Path):
        self.proc = subprocess.Popen(
            [sys.executable, "-c", READER, str(warehouse)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.released = threading.Event()
        self.held = False

    def hold(self) -> None:
        self.held = True
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline().strip() == "held"

    def release(self) -> None:
        if not self.released.is_set():
            self.released.set()
            self.proc.stdin.write("release\n")
            self.proc.stdin.flush()

    def close(self) -> int:
        self.release()
        self.proc.stdin.close()
        out = self.proc.stdout.read()
        return self.proc.wait() if "released" in out else -1


def _held_as_dbt_opens(monkeypatch, reader: Reader) -> None:
    """The reader takes the file right after the build's own checks, as dbt opens it (where
    `qkwh build` used to fail at once)."""
    start = qbuild._start_build  # the build's last open of the file before dbt's

    def start_then_hold(warehouse):
        build_id = start(warehouse)
        if not reader.held:
            reader.hold()
        return build_id

    monkeypatch.setattr(qbuild, "_start_build", start_then_hold)


@pytest.fixture(scope="module")
def held_build(tmp_path_factory):
    """(events, result, reader's exit code) of a build that found the warehouse held."""
    wh = tmp_path_factory.mktemp("held") / "qkwh.duckdb"
    store.connect(wh).close()
    mp = pytest.MonkeyPatch()
    mp.setenv("QKWH_LOCK_TIMEOUT", "600")  # the reader lets go long before; no timing involved
    reader = Reader(wh)
    _held_as_dbt_opens(mp, reader)
    events: list[BuildProgress] = []

    def on_progress(p: BuildProgress) -> None:
        events.append(p)
        if p.event == "waiting":
            reader.release()

    try:
        result = build(wh, progress=on_progress, unit_tests=True)
    finally:
        code = reader.close()
        mp.undo()
    return events, result, code


@pytest.mark.slow
def test_build_waits_for_a_reader_holding_the_file_as_dbt_opens_it(held_build):
    events, result, reader_code = held_build
    waits = [p for p in events if p.event == "waiting"]
    assert len(waits) == 1 and "held by another process" in waits[0].line
    assert str(result.warehouse) in waits[0].line and "QKWH_LOCK_TIMEOUT" in waits[0].line
    assert reader_code == 0  # the reader held the file until the build waited for it
    assert result.success and not result.failed and result.stale is None


@pytest.mark.slow
def test_progress_counts_every_node_by_kind_from_dbts_events(held_build):
    events, result, _ = held_build
    planned = [p for p in events if p.event == "planned"]
    assert len(planned) == 1  # announced once, although dbt ran twice (before and after waiting)
    plan = planned[0]
    nodes = [n for n in result.nodes if n.resource_type != "operation"]  # hooks are not nodes
    by_kind = Counter(n.resource_type for n in nodes)
    assert plan.total == len(nodes) > 100
    assert plan.planned == dict(by_kind)
    assert by_kind["model"] > 20 and by_kind["test"] > 50 and by_kind["unit_test"] > 0
    assert plan.line.startswith(f"dbt: building {len(nodes)} nodes: ")
    assert (
        f"{by_kind['model']} models" in plan.line and f"{by_kind['test']} data tests" in plan.line
    )
    after = events[events.index(plan) :]
    finished = [p for p in after if p.event == "finished"]
    started = [p for p in after if p.event == "started"]
    assert sorted(p.node.unique_id for p in finished) == sorted(n.unique_id for n in nodes)
    assert len(started) == len(finished) and all(p.current for p in started)
    assert finished[-1].done == dict(by_kind) and finished[-1].n_done == plan.total
    assert [p.n_done for p in finished] == list(range(1, plan.total + 1))
    assert all(p.line is None and not p.failures for p in finished)  # nothing failed or warned
    assert finished[-1].running == ()


@pytest.mark.slow  # dbt parses the project before it finds the file held
def test_build_gives_up_after_the_wait_with_exit_code_3(tmp_path, monkeypatch):
    wh = tmp_path / "qkwh.duckdb"
    store.connect(wh).close()
    monkeypatch.setenv("QKWH_LOCK_TIMEOUT", "0.5")
    reader = Reader(wh)
    _held_as_dbt_opens(monkeypatch, reader)
    waits: list[str] = []
    try:
        with pytest.raises(WarehouseLockedError) as info:
            build(wh, progress=lambda p: waits.append(p.line) if p.event == "waiting" else None)
    finally:
        reader.close()
    message = str(info.value)
    assert info.value.exit_code == 3 and "\n" not in message
    assert f"warehouse {wh} is locked by another process" in message and "waited 0.5 s" in message
    assert len(waits) == 1


def test_build_is_refused_while_a_compute_runs(tmp_path):
    from qkwh.compute.runner import compute_lock

    wh = tmp_path / "qkwh.duckdb"
    store.connect(wh).close()
    with compute_lock(wh), pytest.raises(WarehouseLockedError) as info:
        build(wh)
    message = str(info.value)
    assert f"a qkwh compute (process {os.getpid()}) is running on {wh}" in message
    assert "nothing was built" in message and info.value.exit_code == 3
    con = duckdb.connect(str(wh), read_only=True)
    try:  # no build was recorded, nothing was written
        assert con.execute("SELECT count(*) FROM mart_builds").fetchone() == (0,)
    finally:
        con.close()
    assert not qbuild.dbt_work_dir(wh).exists()


def test_a_build_whose_warehouse_changed_under_it_says_stale_not_ok(tmp_path):
    """Another process wrote between the build's start and dbt's open (here: a new label): the
    build's close finds the inputs changed, and its summary says STALE and why instead of ok."""
    from typer.testing import CliRunner

    from qkwh.build import BuildResult
    from qkwh.cli import app
    from tests.conftest import small_synth_args

    data, wh = tmp_path / "m", tmp_path / "qkwh.duckdb"
    for args in (small_synth_args(data), ["ingest", str(data), "--model-id", "m", "-w", str(wh)]):
        r = CliRunner().invoke(app, args)
        assert r.exit_code == 0, r.output

    def dbt_writes(build_id: str, table: str) -> None:  # what dbt records for each table it writes
        con = store.connect(wh)
        try:
            con.execute("INSERT INTO mart_relations VALUES (?, ?)", [table, build_id])
        finally:
            con.close()

    unchanged = qbuild._start_build(wh)
    dbt_writes(unchanged, "model_summary")
    assert qbuild._finish_build(wh, unchanged) is None
    changed = qbuild._start_build(wh)
    dbt_writes(changed, "head_metrics")
    con = store.connect(wh)
    try:
        con.execute("UPDATE models SET label = 'relabelled' WHERE model_id = 'm'")
    finally:
        con.close()
    reason = qbuild._finish_build(wh, changed)
    assert reason is not None and "the warehouse changed while dbt ran" in reason
    result = BuildResult(wh, "build", True, 1.0, (), tmp_path, tmp_path, stale=reason)
    assert result.summary.startswith("dbt build done but STALE in 1.0s")
    assert "ok" not in result.summary.split(":")[0] and reason in result.summary
