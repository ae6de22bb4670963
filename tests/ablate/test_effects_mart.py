"""The mart ablation_effects on planted trials: Wilson bounds in closed form, paired differences
against none and against the random selections, bootstrap bounds around the paired means."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from qkwh import store

Z = 1.959963984540054


def _wilson(x: int, n: int) -> tuple[float, float]:
    p = x / n
    c = (p + Z * Z / (2 * n)) / (1 + Z * Z / n)
    h = Z * math.sqrt(p * (1 - p) / n + Z * Z / (4 * n * n)) / (1 + Z * Z / n)
    return c - h, c + h


def _plant(path: Path) -> dict:
    con = store.connect(path)
    lp = {}
    try:
        con.execute(
            "INSERT INTO ablation_runs (run_id, model_id, metric, rank_order, method, task) "
            "VALUES ('r', 'm', 'ap_overall', 'lowest', 'mean', 'passkey')"
        )
        for trial in range(8):
            base = -1.0 - 0.1 * trial
            rows = {
                ("none", 0): (base, True),
                ("ap_overall", 2): (base - 1.0, trial < 3),  # 3 of 8 correct
                ("random:0", 2): (base - 0.2, True),
                ("random:1", 2): (base - 0.4, trial % 2 == 0),
            }
            for (sel, k), (value, ok) in rows.items():
                lp[(sel, trial)] = value
                con.execute(
                    "INSERT INTO ablation_trials VALUES ('r', ?, ?, [], 512, 0.5, ?, ?, ?)",
                    [sel, k, trial, value, ok],
                )
    finally:
        con.close()
    return lp


@pytest.mark.slow
def test_effects_in_closed_form(tmp_path):
    import duckdb

    from qkwh.build import build

    wh = tmp_path / "w.duckdb"
    _plant(wh)
    result = build(wh, select="ablation_effects")
    assert result.success, result.messages
    con = duckdb.connect(str(wh), read_only=True)
    try:
        cur = con.execute("SELECT * FROM ablation_effects ORDER BY selection")
        names = [d[0] for d in cur.description]
        rows = {r[names.index("selection")]: dict(zip(names, r)) for r in cur.fetchall()}
    finally:
        con.close()
    m = rows["ap_overall"]
    assert m["n_trials"] == 8 and m["n_correct"] == 3
    lo, hi = _wilson(3, 8)
    assert m["accuracy_lo"] == pytest.approx(lo, abs=1e-12)
    assert m["accuracy_hi"] == pytest.approx(hi, abs=1e-12)
    assert rows["none"]["accuracy_lo"] == pytest.approx(_wilson(8, 8)[0], abs=1e-12)
    # paired differences are constant per prompt here, so every bootstrap draw gives them exactly
    assert m["diff_none_logprob"] == pytest.approx(-1.0)
    assert m["diff_none_logprob_lo"] == pytest.approx(-1.0)
    assert m["diff_none_logprob_hi"] == pytest.approx(-1.0)
    assert m["diff_random_logprob"] == pytest.approx(-0.7)  # vs the mean of -0.2 and -0.4
    assert m["diff_random_accuracy"] == pytest.approx(3 / 8 - (1 + 0.5) / 2)
    assert m["distinguishable"] is True and m["differs_from_none"] is True
    assert rows["random:0"]["distinguishable"] is None
    assert rows["none"]["differs_from_none"] is None and rows["none"]["k"] == 0
    # the mean's bootstrap interval holds the mean and lies within the data's range
    assert m["logprob_lo"] < m["mean_logprob"] < m["logprob_hi"]
    assert m["logprob_lo"] >= -2.7 and m["logprob_hi"] <= -2.0
    assert m["n_bootstrap"] == 1000
