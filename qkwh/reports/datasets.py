"""One model captured on two datasets: every compared metric's paired difference with its interval
(``ap-dataset-comparisons``)."""

from __future__ import annotations

import altair as alt

from qkwh.reports.base import (
    Drawn,
    FigureDef,
    Marts,
    NoData,
    require,
    table_of,
)
from qkwh.reports.catalogue import register
from qkwh.reports.intervals import along, errorbar
from qkwh.reports.plasticity import SECTION

DATASET_COLORS = {"layers+documents": "#1f77b4", "layers": "#ff7f0e", "none": "#999999"}


def dataset_comparisons(marts: Marts) -> Drawn:
    """Per metric (one row of panels each, own x scale) and per pair of captures of one model:
    the difference B − A over the heads both hold, with its interval (dataset_comparisons)."""
    if not marts.has("dataset_comparisons"):
        raise NoData("the warehouse has no `dataset_comparisons` (run `qkwh build`)")
    chosen = set(marts.models)
    rows = [
        r
        for r in marts.rows("dataset_comparisons")
        if r["model_a"] in chosen and r["model_b"] in chosen and r.get("difference") is not None
    ]
    require(rows, "no model was captured on two datasets (same hf_model, different dataset)")
    data = []
    for r in rows:
        a, b = marts.display(r["model_a"]), marts.display(r["model_b"])
        data.append(
            {
                "pair": f"{b} − {a} ({r.get('dataset_b') or '?'} − {r.get('dataset_a') or '?'})",
                "metric": r["metric"],
                "difference": r["difference"],
                "ci_low": r.get("ci_low"),
                "ci_high": r.get("ci_high"),
                "kind": r.get("interval") or "none",
                "distinguishable": (
                    "n/a"
                    if r.get("distinguishable") is None
                    else "yes"
                    if r["distinguishable"]
                    else "no"
                ),
                "n_heads": r.get("n_heads"),
                "zero": 0.0,
            }
        )
    metrics = sorted({d["metric"] for d in data})
    pairs = sorted({d["pair"] for d in data})
    x = alt.X("difference:Q", title="difference B − A", scale=alt.Scale(zero=True, nice=True))
    y = alt.Y("pair:N", sort=pairs, title=None, axis=alt.Axis(labelLimit=420))
    color = alt.Color(
        "kind:N",
        title="interval",
        scale=alt.Scale(domain=list(DATASET_COLORS), range=list(DATASET_COLORS.values())),
    )
    tip = [
        alt.Tooltip("pair:N", title="captures"),
        alt.Tooltip("metric:N", title="metric"),
        alt.Tooltip("difference:Q", title="B − A", format=".4g"),
        alt.Tooltip("ci_low:Q", title="interval low", format=".4g"),
        alt.Tooltip("ci_high:Q", title="interval high", format=".4g"),
        alt.Tooltip("kind:N", title="interval terms"),
        alt.Tooltip("distinguishable:N", title="distinguishable"),
        alt.Tooltip("n_heads:Q", title="heads in both"),
    ]
    base = alt.Chart().encode(y=y)
    zero = (
        alt.Chart()
        .mark_rule(color="#888", strokeDash=[4, 3])
        .encode(x=along(x, "zero:Q"))  # the full height of the panel
    )
    bars = errorbar(base, x, color="#333", thickness=1.8, ticks=False)
    pts = base.mark_point(filled=True, size=60, opacity=1).encode(
        x=x, color=color, shape=alt.Shape("distinguishable:N", title="distinguishable"), tooltip=tip
    )
    chart = (
        alt.layer(zero, bars, pts, data=table_of(data))
        .properties(width=420, height=alt.Step(24))
        .facet(row=alt.Row("metric:N", sort=metrics, title=None, header=alt.Header(labelAngle=0)))
        .resolve_scale(x="independent")
        .properties(
            title=alt.Title(
                "One model on two datasets: differences with intervals",
                subtitle=[
                    "per metric and pair of captures: B − A over the heads both captures hold; "
                    "bar = interval, dashed line = 0",
                ],
            )
        )
    )
    kinds = sorted({d["kind"] for d in data})
    caption = (
        "Intervals: layers+documents = the paired layer-cluster bootstrap of the per-head "
        "differences combined with both captures' document-group jackknife, "
        "difference ∓ z·sqrt(se_layers² + se_documents_A² + se_documents_B²); layers = the "
        "bootstrap percentile interval alone (no jackknife). Shown here: "
        + ", ".join(kinds)
        + ". Distinguishable = the interval excludes 0 (dataset_comparisons, docs/uncertainty.md)."
    )
    return Drawn(chart, caption)


register(
    FigureDef(
        "ap-dataset-comparisons",
        SECTION,
        "One model on two datasets",
        "For each model captured on two datasets, the difference of every compared metric "
        "(plasticity, gaps, rotation, PCA) between the captures, head by head, with its interval.",
        ("dataset_comparisons",),
        dataset_comparisons,
        order=6,
    ),
)
