"""Our values beside the published ones (mart ``published_comparison`` and its tolerances)."""

from __future__ import annotations

import altair as alt

from qkwh.reports.base import Drawn, FigureDef, Marts, NoData, model_tooltip, table_of
from qkwh.reports.catalogue import register, section
from qkwh.reports.intervals import Intervals, errorbar

SECTION = section("Published comparison", order=60)

LO, HI = 0.5, 1.5  # ratio axis; values outside are pinned to the edge (tooltip keeps the truth)


def _group(metric: str) -> int:
    m = metric.lower()
    if m.startswith(("ap_", "decile", "quintile", "len_bin", "ruler_bin", "mid_context", "q_")):
        return 2
    if m.startswith(
        (
            "ev",
            "r_q",
            "r_k",
            "pos_var",
            "pc0",
            "frac_position",
            "frac_q",
            "frac_k",
            "frac_content",
            "frac_mixed",
            "qk_",
            "fisher",
            "abs_r_k_0",
        )
    ):
        return 0
    return 1


def _pin(v: float) -> float:
    return min(max(v, LO), HI)


def comparison(marts: Marts) -> Drawn:
    if not marts.has("published_comparison"):
        raise NoData("the warehouse has no published_comparison mart")
    rows = marts.rows("published_comparison", "level = 'model' AND is_preferred")
    if not rows:
        raise NoData(
            "no published values for the ingested models (" + ", ".join(marts.models) + ")"
        )
    rows = [r for r in rows if r.get("our_value") is not None]
    if not rows:
        raise NoData("published values exist for these models but none of them is computed yet")
    ci = Intervals(marts, {r["metric"] for r in rows})
    data = []
    for r in rows:
        pub, ours = r["published_value"], r["our_value"]
        if not pub:
            continue
        ratio = ours / pub
        # our value's interval on the ratio axis, where model_metric_ci has the same metric
        iv = ci.fields(r["model_id"], r["metric"], lambda v, pub=pub: _pin(v / pub))  # type: ignore[misc]
        tol = (r.get("tolerance") or 0) / abs(pub)
        state = (
            "within tolerance"
            if r.get("within_tolerance")
            else "outside tolerance"
            if r.get("within_tolerance") is not None
            else "no tolerance"
        )
        data.append(
            {
                "model_id": r["model_id"],
                "metric": r["metric"],
                "source": r["source_table"],
                "group": _group(r["metric"]),
                "ours": ours,
                "published": pub,
                "ratio": ratio,
                "ratio_shown": _pin(ratio),
                **iv,
                "tol_lo": max(1 - tol, LO),
                "tol_hi": min(1 + tol, HI),
                "difference": r.get("difference"),
                "tolerance": r.get("tolerance"),
                "state": state,
            }
        )
    if not data:
        raise NoData("every published value is 0; no ratio to show")
    metrics = [m for _, m in sorted({(d["group"], d["metric"]) for d in data})]
    states = ["within tolerance", "outside tolerance", "no tolerance"]
    base = alt.Chart().encode(y=alt.Y("metric:N", sort=metrics, title="metric (published name)"))
    band = base.mark_bar(color="#d9ead3", height={"band": 0.7}).encode(
        x=alt.X(
            "tol_lo:Q",
            title="ours ÷ published (ratio; 1 = equal)",
            scale=alt.Scale(domain=[LO, HI]),
        ),
        x2="tol_hi:Q",
    )
    one = alt.Chart().mark_rule(color="#333", strokeDash=[4, 3]).encode(x=alt.datum(1.0))
    pts = base.mark_point(filled=True, size=60).encode(
        x="ratio_shown:Q",
        color=alt.Color(
            "state:N",
            sort=states,
            title="agreement",
            scale=alt.Scale(domain=states, range=["#2ca02c", "#d62728", "#7f7f7f"]),
        ),
        tooltip=model_tooltip(
            alt.Tooltip("metric:N"),
            alt.Tooltip("source:N", title="published in"),
            alt.Tooltip("ours:Q", title="ours", format=".4g"),
            alt.Tooltip("published:Q", title="published", format=".4g"),
            alt.Tooltip("ratio:Q", title="ours ÷ published", format=".3f"),
            alt.Tooltip("tolerance:Q", title="tolerance (abs)", format=".3g"),
            alt.Tooltip("interval:N", title="our interval (as ratio)"),
            alt.Tooltip("state:N", title="agreement"),
        ),
    )
    data = marts.tag(data)
    n_models = len({d["model_id"] for d in data})
    whisk = errorbar(
        base,
        alt.X("ratio_shown:Q", title="ours ÷ published (ratio; 1 = equal)"),
        color="#333",
        thickness=1.2,
    )
    chart = (
        alt.layer(band, one, whisk, pts)
        .properties(width=300, height=alt.Step(16))
        .facet(
            facet=alt.Facet("model:N", title=None, sort=[marts.display(m) for m in marts.models]),
            columns=min(3, n_models),
            data=table_of(data),
        )
        .properties(
            title=alt.Title(
                "Our values beside the published ones",
                subtitle=[
                    "model-level anchors of the thesis tables (preferred source per metric); green band "
                    "= the agreed tolerance around the published value; black bar = our value's interval",
                    f"ratios outside [{LO}, {HI}] are pinned to the edge; the tooltip shows both values",
                ],
            )
        )
    )
    return Drawn(
        chart, ci.caption("Black bars (our value's interval divided by the published value)")
    )


FIGURES = register(
    FigureDef(
        "pub-comparison",
        SECTION,
        "Our values beside the published ones",
        "Every published model-level value for the ingested models, as our value ÷ published "
        "value with the tolerance band and our value's interval.",
        ("published_comparison", "model_metric_ci"),
        comparison,
    ),
)
