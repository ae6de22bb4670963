"""Head ablation (``ablation-retrieval``): passkey retrieval against the number of heads knocked
out, one line per selection (the ranking metric's heads and each random control), a panel per
prompt length; from the mart ``ablation_effects`` (docs/ablation.md)."""

from __future__ import annotations

import altair as alt

from qkwh.reports.base import Absent, Drawn, Marts, table_of
from qkwh.reports.catalogue import figure, section

SECTION = section("Head ablation", order=55)
NO_RUNS = "no ablation runs (run `qkwh ablate`, then `qkwh build`)"
MEASURES = (
    ("accuracy", "accuracy_lo", "accuracy_hi", "passkey accuracy (Wilson 95 %)"),
    ("mean_logprob", "logprob_lo", "logprob_hi", "key log-probability, nats (bootstrap 95 %)"),
)


def _series(row: dict) -> str:
    """The line a row belongs to: the metric's selection, or a random control of that run."""
    order = row.get("rank_order") or ""
    if row["selection_kind"] == "random":
        return f"{row['selection']} (run by {row['metric']})"
    return f"{row['selection']}, {order}"


def retrieval_rows(rows: list[dict]) -> list[dict]:
    """Long records (one per measure) for the chart; every line starts at k = 0 with the
    unablated model's value on the same prompts."""
    none = {(r["run_id"], r["length"]): r for r in rows if r["selection_kind"] == "none"}
    out = []
    for r in rows:
        if r["selection_kind"] == "none":
            continue
        base = none.get((r["run_id"], r["length"]))
        for src in ([base] if base else []) + [r]:
            for value, lo, hi, label in MEASURES:
                out.append(
                    {
                        "series": _series(r),
                        "kind": r["selection_kind"],
                        "length": src["length"],
                        "k": src["k"],
                        "measure": label,
                        "value": src[value],
                        "lo": src[lo],
                        "hi": src[hi],
                        "n_trials": src["n_trials"],
                        "distinguishable": r.get("distinguishable") if src is r else None,
                    }
                )
    return out


@figure(
    "ablation-retrieval",
    section=SECTION,
    title="Retrieval against heads ablated",
    caption=(
        "Passkey retrieval after knocking out the k heads a metric ranks first (solid) and k "
        "random computed heads (dashed), a panel per prompt length; k = 0 is the unablated "
        "model on the same prompts. Top: accuracy (greedy exact match) with Wilson 95 % "
        "intervals; bottom: the key's log-probability with bootstrap 95 % intervals over "
        "prompts. A filled point: the metric's heads differ from random ones (paired bootstrap "
        "interval of the difference excludes 0)."
    ),
    sources=("ablation_effects",),
    per_model=True,
)
def ablation_retrieval(marts: Marts, model_id: str) -> Drawn:
    if not marts.has("ablation_effects"):
        raise Absent(NO_RUNS)
    rows = marts.rows("ablation_effects", "model_id = ?", [model_id], order="run_id, selection, k")
    data = retrieval_rows(rows)
    if not data:
        raise Absent(NO_RUNS)
    panels = []
    for _value, _lo, _hi, label in MEASURES:
        part = [d for d in data if d["measure"] == label]
        base = alt.Chart().encode(
            x=alt.X("k:Q", title="heads ablated (k)"),
            color=alt.Color("series:N", title="selection"),
            strokeDash=alt.StrokeDash(
                "kind:N",
                title="kind",
                scale=alt.Scale(domain=["metric", "random"], range=[[1, 0], [4, 3]]),
            ),
        )
        line = base.mark_line().encode(y=alt.Y("value:Q", title=label), order="k:Q")
        bars = base.mark_rule(opacity=0.5).encode(y="lo:Q", y2="hi:Q")
        dots = base.mark_point(size=40).encode(
            y="value:Q",
            fill=alt.condition(
                "datum.distinguishable === true",
                alt.Fill("series:N", legend=None),
                alt.value("white"),
            ),
            tooltip=[
                "series:N",
                "length:Q",
                "k:Q",
                alt.Tooltip("value:Q", format=".3f"),
                alt.Tooltip("lo:Q", format=".3f"),
                alt.Tooltip("hi:Q", format=".3f"),
                "n_trials:Q",
                "distinguishable:N",
            ],
        )
        panels.append(
            alt.layer(bars, line, dots, data=table_of(part))
            .properties(width=230, height=150)
            .facet(column=alt.Column("length:O", title="prompt length (tokens)"))
        )
    chart = alt.vconcat(*panels)
    runs = sorted({(r["metric"], r["rank_order"], r["method"]) for r in rows})
    note = "Runs: " + "; ".join(f"{m} ({o}, {meth} ablation)" for m, o, meth in runs) + "."
    return Drawn(chart, note)
