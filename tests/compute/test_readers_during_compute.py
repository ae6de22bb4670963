"""Readers while `qkwh compute` runs: the writer holds the warehouse only while it writes a batch,
so read-only queries succeed during a long compute (they wait while a batch is written), and the
writer waits while a reader holds the file.  The results are those of an undisturbed run."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from qkwh import store
from qkwh.ingest import ingest
from qkwh.synth import write_dataset

pytestmark = pytest.mark.slow  # computes 64 heads in a subprocess

N_HEADS = 64  # 4 layers x 16 query heads


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("synth") / "m64"
    write_dataset(
        root,
        n_layers=4,
        n_q_heads=16,
        n_kv_heads=4,
        d=32,
        rows_per_file=1500,
        n_examples=16,
        context_length=8192,
        bucket_size=512,
        seed=3,
    )
    return root


def test_read_only_queries_succeed_while_compute_runs(model: Path, tmp_path: Path):
    db = tmp_path / "wh.duckdb"
    ingest(str(model), warehouse=db, model_id="m64")
    env = {**os.environ, "QKWH_LOCK_TIMEOUT": "60"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "qkwh.cli", "compute", "-w", str(db), "-j", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    seen: list[int] = []  # head_runs counts read while the compute was running
    held = False
    try:
        deadline = time.monotonic() + 600
        while proc.poll() is None and time.monotonic() < deadline:
            con = store.connect(db, read_only=True, wait=30)
            try:
                n = con.execute("SELECT count(DISTINCT (layer, q_head)) FROM head_runs").fetchone()[
                    0
                ]
                # whole heads only: every head in head_runs has its rows in every table
                assert (
                    con.execute(
                        "SELECT count(DISTINCT (layer, q_head)) FROM plasticity_heads"
                    ).fetchone()[0]
                    == n
                )
                if proc.poll() is None:
                    seen.append(n)
                if (
                    0 < n < N_HEADS and not held
                ):  # a reader that keeps the file a while: the writer waits
                    held = True
                    time.sleep(1.5)
            finally:
                con.close()
            time.sleep(0.05)
        out, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-2000:]
    assert f"computed {N_HEADS} head(s)" in out
    assert held, f"no read landed between two batches: {seen}"
    assert any(0 < n < N_HEADS for n in seen), seen
    assert seen == sorted(seen)
    # the `qkwh sql` command reads too (here after the run; during it, it waits like the reader above)
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "qkwh.cli",
            "sql",
            "-w",
            str(db),
            "SELECT count(*) AS n FROM rotation_heads",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0 and str(N_HEADS) in r.stdout
