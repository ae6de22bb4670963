"""Every exit code of the README's table, produced through the CLI.

0 ok · 1 failure (analysis errors included) · 2 bad input or usage · 3 warehouse locked by
another process · 4 not found · 130 interrupted (Ctrl-C).  The table is read from README.md, so
a code documented there without a test here (or the reverse) fails.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from qkwh.cli import app

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()
MODEL = "synth-e"
TESTED = {0, 1, 2, 3, 4, 130}  # the codes the tests below produce


def cli(*args: str):
    return runner.invoke(app, list(args))


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("exit-codes")
    data, db = tmp / MODEL, tmp / "wh.duckdb"
    for args in (["synth", str(data), "--layers", "2", "--q-heads", "2", "--kv-heads", "1", "--head-dim", "16",
                  "--rows", "300"],
                 ["ingest", str(data), "--model-id", MODEL, "-w", str(db)],
                 ["compute", "-w", str(db), "-a", "pca", "-j", "1"]):
        r = cli(*args)
        assert r.exit_code == 0, r.output + r.stderr
    return db, data


def test_the_readme_table_lists_exactly_the_tested_codes():
    text = (REPO / "README.md").read_text()
    section = text.split("### Exit codes", 1)[1].split("\n#", 1)[0]
    codes = {int(m) for m in re.findall(r"^\| `?(\d+)`? \|", section, re.M)}
    assert codes == TESTED


def test_0_ok(warehouse):
    db, _ = warehouse
    r = cli("models", "-w", str(db))
    assert r.exit_code == 0 and MODEL in r.stdout


def test_1_failure_and_analysis_errors(warehouse, tmp_path: Path):
    db, data = warehouse
    r = cli("sql", "SELECT * FROM no_such_table", "-w", str(db))
    assert r.exit_code == 1 and "no_such_table" in r.stderr
    # a head whose query file is gone fails; the others are written
    copy = tmp_path / "copy"
    shutil.copytree(data, copy)
    db2 = tmp_path / "wh2.duckdb"
    assert cli("ingest", str(copy), "--model-id", MODEL, "-w", str(db2)).exit_code == 0
    shutil.rmtree(copy / "l01h01q")
    r = cli("compute", "-w", str(db2), "-a", "pca", "-j", "1")
    assert r.exit_code == 1
    assert "1 head(s) failed; the others were written" in r.stderr


def test_2_bad_input_and_usage(warehouse):
    db, _ = warehouse
    r = cli("compute", "-w", str(db), "-p", "rotation.t_active=-1")
    assert r.exit_code == 2 and "rotation.t_active must be in [0, 1]" in r.stderr
    r = cli("compute", "--no-such-option")  # typer's usage errors
    assert r.exit_code == 2
    r = cli("remove", MODEL, "-w", str(db))  # deleting needs --yes without a terminal
    assert r.exit_code == 2 and "pass --yes" in r.stderr


def test_3_warehouse_locked_by_another_process(warehouse, monkeypatch):
    db, _ = warehouse
    monkeypatch.setenv("QKWH_LOCK_TIMEOUT", "0.5")  # the holder never lets go: no use waiting 10 s
    # the holder keeps the warehouse open until its stdin closes (no time limit: no race on a slow machine)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import duckdb, sys; con = duckdb.connect(sys.argv[1]); "
         "print('holding', flush=True); sys.stdin.read()", str(db)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "holding"
        for args in (["compute", "-j", "1"], ["sql", "SELECT 1"], ["remove", MODEL, "--yes"]):
            r = cli(*args, "-w", str(db))
            assert r.exit_code == 3, (args, r.output + r.stderr)
            assert f"warehouse {db} is locked by another process" in r.stderr
    finally:
        holder.kill()
        holder.wait()


def test_4_not_found(warehouse, tmp_path: Path):
    db, _ = warehouse
    r = cli("findings", "no-such-model", "-w", str(db))
    assert r.exit_code == 4 and f"(have: {MODEL})" in r.stderr
    r = cli("compute", "-w", str(tmp_path / "absent.duckdb"))
    assert r.exit_code == 4 and not (tmp_path / "absent.duckdb").exists()
    r = cli("remove", "no-such-model", "--yes", "-w", str(db))
    assert r.exit_code == 4 and "no model 'no-such-model'" in r.stderr
    r = cli("compute", "-w", str(db), "-m", "no-such-model")
    assert r.exit_code == 4 and "no model 'no-such-model'" in r.stderr


@pytest.mark.slow
def test_130_ctrl_c_in_build_prints_one_line(warehouse, tmp_path: Path):
    import gc

    gc.collect()  # connections the in-process CLI runs above may still hold (tracebacks kept by CliRunner)
    db = tmp_path / "wh.duckdb"
    shutil.copy(warehouse[0], db)
    env = {k: v for k, v in os.environ.items() if k != "QKWH_WAREHOUSE"}
    proc = subprocess.Popen([sys.executable, "-m", "qkwh.cli", "build", "-w", str(db)], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    started = threading.Event()

    def read() -> None:
        for line in proc.stderr:
            lines.append(line.rstrip("\n"))
            if " START " in line:  # dbt is running nodes
                started.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert started.wait(300), "\n".join(lines)
        proc.send_signal(signal.SIGINT)
        code = proc.wait(120)
    finally:
        if proc.poll() is None:
            proc.kill()
    reader.join(10)
    text = "\n".join(lines)
    assert code == 130, text
    assert "Traceback" not in text and "KeyboardInterrupt" not in text and "Encountered an error" not in text
    interrupted = [line for line in lines if "interrupted" in line]
    assert len(interrupted) == 1 and interrupted[0] == lines[-1], text
    assert lines[-1].startswith("error: dbt build interrupted: marts built so far are kept")
