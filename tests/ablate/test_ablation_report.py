"""The report's ablation figure: registered in its section, every line starts at the unablated
model's value, nothing drawn without runs."""

from __future__ import annotations

from qkwh.reports import ablation
from qkwh.reports.catalogue import catalogue


def _row(sel, kind, k, acc, lp, dist=None):
    return {
        "run_id": "r",
        "metric": "ap_overall",
        "rank_order": "lowest",
        "method": "mean",
        "selection": sel,
        "selection_kind": kind,
        "k": k,
        "length": 512,
        "n_trials": 4,
        "accuracy": acc,
        "accuracy_lo": acc - 0.1,
        "accuracy_hi": acc + 0.1,
        "mean_logprob": lp,
        "logprob_lo": lp - 0.2,
        "logprob_hi": lp + 0.2,
        "distinguishable": dist,
    }


def test_lines_start_at_the_unablated_model():
    rows = [
        _row("none", "none", 0, 1.0, -1.0),
        _row("ap_overall", "metric", 2, 0.5, -2.0, True),
        _row("random:0", "random", 2, 0.75, -1.5),
    ]
    data = ablation.retrieval_rows(rows)
    acc = [d for d in data if d["measure"].startswith("passkey accuracy")]
    by_series = {}
    for d in acc:
        by_series.setdefault(d["series"], []).append((d["k"], d["value"]))
    assert by_series == {
        "ap_overall, lowest": [(0, 1.0), (2, 0.5)],
        "random:0 (run by ap_overall)": [(0, 1.0), (2, 0.75)],
    }
    flagged = [d for d in data if d["distinguishable"]]
    assert {(d["series"], d["k"]) for d in flagged} == {("ap_overall, lowest", 2)}
    assert ablation.retrieval_rows([_row("none", "none", 0, 1.0, -1.0)]) == []


def test_the_figure_is_in_the_catalogue():
    figs = [f for f in catalogue() if f.key == "ablation-retrieval"]
    assert len(figs) == 1
    assert figs[0].sources == ("ablation_effects",) and figs[0].per_model
    assert figs[0].section == "Head ablation"
