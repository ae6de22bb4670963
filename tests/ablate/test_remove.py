"""`qkwh remove MODEL` deletes the model's ablation runs with their prompts and trials (keyed
by run_id, not model_id) and leaves other models' runs alone."""

from __future__ import annotations

from pathlib import Path

import duckdb

from tests.conftest import qkwh_cli as cli
from tests.conftest import qkwh_ok as ok
from tests.conftest import synth_args

MODEL = "synth-r"


def _plant(db: Path, model_id: str, run_id: str, n: int) -> None:
    con = duckdb.connect(str(db))
    try:
        con.execute(
            "INSERT INTO ablation_runs (run_id, model_id) VALUES (?, ?)", [run_id, model_id]
        )
        for t in range(n):
            con.execute(
                "INSERT INTO ablation_prompts (run_id, length, depth, trial) VALUES (?, 64, 0.5, ?)",
                [run_id, t],
            )
            for sel, k in (("none", 0), ("ap_overall", 2)):
                con.execute(
                    "INSERT INTO ablation_trials (run_id, selection, k, length, depth, trial, "
                    "logprob, correct) VALUES (?, ?, ?, 64, 0.5, ?, -1.0, true)",
                    [run_id, sel, k, t],
                )
    finally:
        con.close()


def _counts(db: Path, run_id: str) -> tuple[int, int, int]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return tuple(  # type: ignore[return-value]
            con.execute(f"SELECT count(*) FROM {t} WHERE run_id = ?", [run_id]).fetchone()[0]
            for t in ("ablation_runs", "ablation_prompts", "ablation_trials")
        )
    finally:
        con.close()


def test_remove_deletes_the_models_ablation_rows_only(tmp_path: Path):
    data, db = tmp_path / MODEL, tmp_path / "wh.duckdb"
    ok(*synth_args(str(data), seed=4))
    ok("ingest", str(data), "--model-id", MODEL, "-w", str(db))
    _plant(db, MODEL, "run-mine", 3)
    _plant(db, "another-model", "run-other", 2)
    assert _counts(db, "run-mine") == (1, 3, 6)

    refused = cli("remove", MODEL, "-w", str(db))  # the plan counts the run-keyed rows too
    assert refused.exit_code == 2
    assert "ablation_trials: 6" in refused.stderr and "ablation_prompts: 3" in refused.stderr
    assert "ablation_runs: 1" in refused.stderr
    assert _counts(db, "run-mine") == (1, 3, 6)

    ok("remove", MODEL, "--yes", "-w", str(db))
    assert _counts(db, "run-mine") == (0, 0, 0)
    assert _counts(db, "run-other") == (1, 2, 4)
