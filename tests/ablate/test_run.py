"""`qkwh ablate` end to end on tiny random models in planted warehouses: rows, an identical rerun,
kill -9 and resume, a mismatched model refused, the missing extra named."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from ablate_helpers import need_capture_extra, planted_warehouse, save_model

need_capture_extra()

import duckdb  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from qkwh import store  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
VALUES = {(0, 0): 0.3, (0, 3): 0.1, (1, 1): 0.1, (2, 2): 0.7, (2, 0): 0.5, (1, 3): 0.2}
ARGS = ["--rank-by", "m", "--k", "1,3", "--random-seeds", "2", "--depths", "0.2,0.8"]


@pytest.fixture(scope="module")
def llama(tmp_path_factory) -> Path:
    return save_model("llama", tmp_path_factory.mktemp("models") / "tiny-llama")


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="200")
    return subprocess.run(
        [sys.executable, "-m", "qkwh.cli", "ablate", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
    )


def _rows(wh: Path) -> dict[str, list]:
    con = duckdb.connect(str(wh), read_only=True)
    try:
        return {
            "trials": con.execute(
                "SELECT selection, k, heads, length, depth, trial, round(logprob, 9), correct "
                "FROM ablation_trials ORDER BY ALL"
            ).fetchall(),
            "prompts": con.execute(
                "SELECT length, depth, trial, prompt, passkey, input_ids, answer_start "
                "FROM ablation_prompts ORDER BY ALL"
            ).fetchall(),
            "runs": con.execute(
                "SELECT run_id, model_id, metric, rank_order, method, ks, finished_at IS NOT NULL "
                "FROM ablation_runs"
            ).fetchall(),
        }
    finally:
        con.close()


@pytest.mark.slow
def test_run_rows_and_an_identical_rerun_adds_nothing(llama, tmp_path):
    wh = planted_warehouse(tmp_path / "w.duckdb", "tiny", "llama", VALUES)
    r = _cli(
        str(llama),
        "--model-id",
        "tiny",
        *ARGS,
        "--lengths",
        "240",
        "--trials",
        "2",
        "-w",
        str(wh),
        "--method",
        "zero",
    )
    assert r.returncode == 0, r.stderr
    rows = _rows(wh)
    # none + 2 k x (metric + 2 seeds) = 7 selections x 4 prompts
    assert len(rows["trials"]) == 28 and len(rows["prompts"]) == 4
    metric_heads = {t[1]: t[2] for t in rows["trials"] if t[0] == "m"}
    assert metric_heads[1] == [{"layer": 0, "q_head": 3}]  # 0.1 tie: layer 0 before layer 1
    assert metric_heads[3] == [
        {"layer": 0, "q_head": 3},
        {"layer": 1, "q_head": 1},
        {"layer": 1, "q_head": 3},
    ]
    assert rows["runs"][0][1:] == ("tiny", "m", "lowest", "zero", [1, 3], True)
    again = _cli(
        str(llama),
        "--model-id",
        "tiny",
        *ARGS,
        "--lengths",
        "240",
        "--trials",
        "2",
        "-w",
        str(wh),
        "--method",
        "zero",
    )
    assert again.returncode == 0, again.stderr
    assert "nothing to add" in again.stdout
    assert _rows(wh) == rows


def _count(wh: Path) -> int:
    try:
        con = duckdb.connect(str(wh), read_only=True)
    except duckdb.Error:  # the writer holds the file for a moment
        return -1
    try:
        return con.execute("SELECT count(*) FROM ablation_trials").fetchone()[0]
    except duckdb.Error:
        return -1
    finally:
        con.close()


@pytest.mark.slow
def test_kill_9_mid_run_resumes_to_the_rows_of_an_undisturbed_run(llama, tmp_path):
    args = [*ARGS, "--lengths", "240,300", "--trials", "5", "--method", "mean"]
    calm = planted_warehouse(tmp_path / "calm.duckdb", "tiny", "llama", VALUES)
    r = _cli(str(llama), "--model-id", "tiny", *args, "-w", str(calm))
    assert r.returncode == 0, r.stderr
    want = _rows(calm)
    total = len(want["trials"])
    assert total == 7 * 20

    wh = planted_warehouse(tmp_path / "killed.duckdb", "tiny", "llama", VALUES)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "qkwh.cli",
            "ablate",
            str(llama),
            "--model-id",
            "tiny",
            *args,
            "-w",
            str(wh),
        ],
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        seen = 0
        while proc.poll() is None:  # wait for the first batches (an event: rows committed)
            seen = _count(wh)
            if seen >= 30:
                proc.send_signal(signal.SIGKILL)
                break
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL, "the run ended before it could be killed"
    partial = _count(wh)
    assert 0 < partial < total
    r = _cli(str(llama), "--model-id", "tiny", *args, "-w", str(wh))
    assert r.returncode == 0, r.stderr
    assert f"{partial} were already there" in r.stdout
    got = _rows(wh)
    assert got["trials"] == want["trials"]
    assert got["prompts"] == want["prompts"]
    assert [x[1:] for x in got["runs"]] == [x[1:] for x in want["runs"]]


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.mark.slow
def test_a_mismatched_model_is_refused_and_the_warehouse_unchanged(tmp_path):
    qwen = save_model("qwen2", tmp_path / "tiny-qwen2")
    wh = planted_warehouse(tmp_path / "w.duckdb", "tiny", "llama", VALUES)
    before = _sha(wh)
    r = _cli(str(qwen), "--model-id", "tiny", *ARGS, "--lengths", "240", "-w", str(wh))
    assert r.returncode == 2
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, r.stderr  # one error line (the others are loading progress)
    assert "does not match the ingested model tiny" in lines[0]
    assert "qwen2" in lines[0] and "llama" in lines[0]  # names both
    assert "num_layers 2 vs 3" in lines[0]
    assert _sha(wh) == before


def test_unknown_metric_and_missing_extra_are_one_line(tmp_path, monkeypatch):
    from qkwh.cli import app

    wh = planted_warehouse(tmp_path / "w.duckdb", "tiny", "llama", VALUES)
    before = _sha(wh)
    runner = CliRunner()
    r = runner.invoke(
        app, ["ablate", "x.gguf", "--model-id", "tiny", "--rank-by", "mm", "-w", str(wh)]
    )
    assert r.exit_code == 2
    assert "no" in r.output or "not a numeric column" in r.output
    assert "did you mean 'm'" in r.output and "available: m, m2" in r.output
    monkeypatch.setitem(sys.modules, "torch", None)  # the capture extra missing
    r = runner.invoke(
        app, ["ablate", "x.gguf", "--model-id", "tiny", "--rank-by", "m", "-w", str(wh)]
    )
    assert r.exit_code == 2
    assert "pip install 'qkwh[capture]'" in r.output
    assert len([ln for ln in r.output.splitlines() if ln.strip()]) == 1
    assert _sha(wh) == before


def test_the_store_creates_the_ablation_tables(tmp_path):
    con = store.connect(tmp_path / "w.duckdb")
    try:
        cols = con.execute(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_name = 'ablation_trials' ORDER BY ordinal_position"
        ).fetchall()
    finally:
        con.close()
    assert [c[0] for c in cols] == [
        "run_id",
        "selection",
        "k",
        "heads",
        "length",
        "depth",
        "trial",
        "logprob",
        "correct",
    ]
