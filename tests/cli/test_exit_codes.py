"""Every exit code of the README's table, produced through the CLI.

0 ok · 1 failure (analysis errors included) · 2 bad input or usage · 3 warehouse locked by
another process · 4 not found · 130 interrupted (Ctrl-C).  The table is read from README.md and
walked: each situation it lists is produced here and must exit with its code, so a situation
documented there without a producer here (or the reverse) fails.
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

from tests.conftest import qkwh_cli as cli
from tests.conftest import small_synth_args

REPO = Path(__file__).resolve().parents[2]
MODEL = "synth-e"
TESTED = {0, 1, 2, 3, 4, 130}  # the codes the tests below produce


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("exit-codes")
    data, db = tmp / MODEL, tmp / "wh.duckdb"
    for args in (
        small_synth_args(data),
        ["ingest", str(data), "--model-id", MODEL, "-w", str(db)],
        ["compute", "-w", str(db), "-a", "pca", "-j", "1"],
    ):
        r = cli(*args)
        assert r.exit_code == 0, r.output + r.stderr
    return db, data


def _readme_table() -> list[tuple[int, str]]:
    """(code, situation) for every situation listed in the README's exit-code table (third column,
    separated by semicolons)."""
    text = (REPO / "README.md").read_text()
    section = re.split(r"^#+ Exit codes\s*$", text, maxsplit=1, flags=re.M)[1]
    rows = []
    for line in section.splitlines():
        m = re.match(r"^\| `?(\d+)`? \|[^|]*\|(.*)\|\s*$", line)
        if m:
            rows += [(int(m.group(1)), s.strip()) for s in m.group(2).split(";") if s.strip()]
        elif rows and not line.startswith("|"):
            break
    return rows


TABLE = _readme_table()


def _ok(warehouse, tmp_path):
    r = cli("models", "-w", str(warehouse[0]))
    assert MODEL in r.stdout
    return r


def _analysis_error(warehouse, tmp_path):
    """A head whose query file is gone fails; the others are written."""
    _, data = warehouse
    copy = tmp_path / "copy"
    shutil.copytree(data, copy)
    db2 = tmp_path / "wh2.duckdb"
    assert cli("ingest", str(copy), "--model-id", MODEL, "-w", str(db2)).exit_code == 0
    shutil.rmtree(copy / "l01h01q")
    r = cli("compute", "-w", str(db2), "-a", "pca", "-j", "1")
    assert "1 head(s) failed; the others were written" in r.stderr
    return r


def _sql_error(warehouse, tmp_path):
    r = cli("sql", "SELECT * FROM no_such_table", "-w", str(warehouse[0]))
    assert "no_such_table" in r.stderr
    return r


def _invalid_parameters(warehouse, tmp_path):
    r = cli("compute", "-w", str(warehouse[0]), "-p", "rotation.t_active=-1")
    assert "rotation.t_active must be in [0, 1]" in r.stderr
    return r


def _unknown_option(warehouse, tmp_path):
    return cli("compute", "--no-such-option")  # typer's usage errors


def _unknown_analysis(warehouse, tmp_path):
    r = cli("compute", "-w", str(warehouse[0]), "-a", "pcaa")
    assert "unknown analysis 'pcaa'" in r.stderr
    return r


def _missing_extra(warehouse, tmp_path):
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(
            sys.modules, "ray", None
        )  # `import ray` fails as when the extra is not installed
        r = cli("compute", "-w", str(warehouse[0]), "--executor", "ray", "--force")
    assert "pip install 'qkwh[ray]'" in r.stderr
    return r


def _not_a_dataset(warehouse, tmp_path):
    (tmp_path / "junk" / "sub").mkdir(parents=True)
    r = cli("ingest", str(tmp_path / "junk"), "--model-id", "junk", "-w", str(warehouse[0]))
    assert "junk" in r.stderr
    return r


def _deletion_without_yes(warehouse, tmp_path):
    r = cli("remove", MODEL, "-w", str(warehouse[0]))  # CliRunner's stdin is not a terminal
    assert "pass --yes" in r.stderr
    return r


def _sql_not_one_query(warehouse, tmp_path):
    target = tmp_path / "out.csv"
    r = cli("sql", f"COPY (SELECT 1) TO '{target}'", "-w", str(warehouse[0]))
    assert not target.exists()
    return r


def _foreign_duckdb_file(warehouse, tmp_path):
    import duckdb

    other = tmp_path / "other.duckdb"
    con = duckdb.connect(str(other))
    con.execute("CREATE TABLE notes (x INTEGER)")
    con.close()
    r = cli("status", "-w", str(other))
    con = duckdb.connect(str(other), read_only=True)
    try:
        assert [
            t for (t,) in con.execute("SELECT table_name FROM information_schema.tables").fetchall()
        ] == ["notes"]
    finally:
        con.close()
    return r


def _locked(warehouse, tmp_path):
    db, _ = warehouse
    # the holder keeps the warehouse open until its stdin closes (no time limit: no race on a slow machine)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import duckdb, sys; con = duckdb.connect(sys.argv[1]); "
            "print('holding', flush=True); sys.stdin.read()",
            str(db),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "holding"
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("QKWH_LOCK_TIMEOUT", "0.5")  # the holder never lets go: no use waiting 10 s
            results = [
                cli(*args, "-w", str(db))
                for args in (
                    ["compute", "-j", "1"],
                    ["sql", "SELECT 1"],
                    ["remove", MODEL, "--yes"],
                )
            ]
    finally:
        holder.kill()
        holder.wait()
    for r in results:
        assert r.exit_code == 3 and f"warehouse {db} is locked by another process" in r.stderr, (
            r.stderr
        )
    return results[0]


def _unknown_model(warehouse, tmp_path):
    db, _ = warehouse
    r = cli("findings", "no-such-model", "-w", str(db))
    assert f"(have: {MODEL})" in r.stderr and r.exit_code == 4
    r = cli("remove", "no-such-model", "--yes", "-w", str(db))
    assert "no model 'no-such-model'" in r.stderr and r.exit_code == 4
    r = cli("compute", "-w", str(db), "-m", "no-such-model")
    assert "no model 'no-such-model'" in r.stderr
    return r


def _no_warehouse(warehouse, tmp_path):
    r = cli("compute", "-w", str(tmp_path / "absent.duckdb"))
    assert not (tmp_path / "absent.duckdb").exists()
    return r


def _missing_ingest_folder(warehouse, tmp_path):
    r = cli("ingest", str(tmp_path / "nowhere"), "--model-id", "x", "-w", str(warehouse[0]))
    assert "nowhere: no such folder" in r.stderr
    return r


def _moved_files(warehouse, tmp_path):
    _, data = warehouse
    copy = tmp_path / "moved"
    shutil.copytree(data, copy)
    db2 = tmp_path / "wh3.duckdb"
    assert cli("ingest", str(copy), "--model-id", MODEL, "-w", str(db2)).exit_code == 0
    copy.rename(tmp_path / "elsewhere")
    r = cli("compute", "-w", str(db2), "-a", "pca", "-j", "1")
    assert MODEL in r.stderr
    return r


def _closed_pipe(warehouse, tmp_path):
    """`qkwh sql ... | head -1`: the reader goes away; the command ends quietly."""
    import types

    env = {k: v for k, v in os.environ.items() if k != "QKWH_WAREHOUSE"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "qkwh.cli", "sql", "SELECT * FROM range(200000)", "-f", "csv"]
        + ["-w", str(warehouse[0])],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    code = proc.wait(120)
    assert err == "", err
    return types.SimpleNamespace(exit_code=code, output="", stderr=err)


SITUATIONS = {
    "a command that did what it was asked": _ok,
    "a reader that stops early (output piped into `head`)": _closed_pipe,
    "an analysis error on some heads": _analysis_error,
    "a SQL error": _sql_error,
    "invalid parameters (`-p rotation.t_active=-1`)": _invalid_parameters,
    "an unknown option": _unknown_option,
    "an unknown analysis (`-a pcaa`)": _unknown_analysis,
    "a missing optional extra (`--executor ray` without Ray)": _missing_extra,
    "input data that is not a captured dataset": _not_a_dataset,
    "a deletion without `--yes` when stdin is not a terminal": _deletion_without_yes,
    "a `qkwh sql` statement that is not one query (`COPY ... TO`)": _sql_not_one_query,
    "a DuckDB file that is not a qkwh warehouse": _foreign_duckdb_file,
    "another process holding the warehouse": _locked,
    "an unknown model": _unknown_model,
    "no warehouse file": _no_warehouse,
    "a missing ingest folder": _missing_ingest_folder,
    "a model's moved parquet files": _moved_files,
    "Ctrl-C during `qkwh build`": None,  # test_130_ctrl_c_in_build_prints_one_line (a subprocess, slow)
}


def test_the_readme_table_lists_exactly_the_situations_walked_here():
    assert {code for code, _ in TABLE} == TESTED
    assert sorted(s for _, s in TABLE) == sorted(SITUATIONS)


@pytest.mark.parametrize(
    ("code", "situation"),
    [(c, s) for c, s in TABLE if SITUATIONS.get(s)],
    ids=[s for c, s in TABLE if SITUATIONS.get(s)],
)
def test_each_situation_of_the_readme_table_exits_with_its_code(
    warehouse, tmp_path: Path, code: int, situation: str
):
    r = SITUATIONS[situation](warehouse, tmp_path)
    assert r.exit_code == code, (situation, r.output + r.stderr)


@pytest.mark.slow
def test_130_ctrl_c_in_build_prints_one_line(warehouse, tmp_path: Path):
    import gc

    gc.collect()  # connections the in-process CLI runs above may still hold (tracebacks kept by CliRunner)
    db = tmp_path / "wh.duckdb"
    shutil.copy(warehouse[0], db)
    env = {k: v for k, v in os.environ.items() if k != "QKWH_WAREHOUSE"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "qkwh.cli", "build", "-w", str(db)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    started = threading.Event()

    def read() -> None:
        for line in proc.stderr:
            lines.append(line.rstrip("\n"))
            if line.startswith("dbt: building "):  # dbt is running nodes
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
    assert (
        "Traceback" not in text
        and "KeyboardInterrupt" not in text
        and "Encountered an error" not in text
    )
    interrupted = [line for line in lines if "interrupted" in line]
    assert len(interrupted) == 1 and interrupted[0] == lines[-1], text
    assert lines[-1].startswith("error: dbt build interrupted: marts built so far are kept")
