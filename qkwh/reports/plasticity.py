"""Attention-plasticity figures of one family (docs/metrics/plasticity.md): the per-model heatmap
and head profiles, component weights and the decile profiles across models.  The other
plasticity figures have their own modules: ``forest`` (models by ap_drop), ``datasets`` (one
model on two datasets), ``benchmark`` (ap_drop vs benchmark score) and ``gauss`` (Gaussian vs
empirical plasticity)."""

from __future__ import annotations

from typing import Any

import altair as alt

from qkwh.reports.base import (
    Drawn,
    FigureDef,
    Marts,
    NoData,
    finite,
    head_tooltip,
    model_look,
    model_tooltip,
    require,
    table_of,
    token_axis,
)
from qkwh.reports.catalogue import register, section
from qkwh.reports.intervals import Intervals, along, point_marks

SECTION = section("Plasticity", order=30)

AP_TITLE = "attention plasticity AP (0–1)"
AP_MEANING = "AP → 1: the query's content decides which key wins; AP → 0: position decides"
NO_EMPIRICAL = (
    "no empirical plasticity in the warehouse: run `qkwh compute -p "
    "plasticity.empirical=true` and `qkwh build`"
)


def heatmap(marts: Marts, model_id: str) -> alt.LayerChart:
    rows = marts.rows("plasticity_heatmap_model", "model_id = ?", [model_id])
    rows = require([r for r in rows if r.get("n")], f"{model_id}: no plasticity heatmap cells")
    name = marts.display(model_id)
    for r in rows:
        r["model"] = name
        w = r["bin_width_tokens"]
        r["dx_end"] = r["dx_tokens"] + w
        r["dm_end"] = r["dm_tokens"] + w
        r["state"] = "masked (n < n_min)" if r["masked"] else "value"
    if all(r["masked"] for r in rows):
        raise NoData(f"{model_id}: every heatmap cell has fewer pairs than n_min")
    w = rows[0]["bin_width_tokens"]
    base = alt.Chart().encode(
        x=alt.X(
            "dx_tokens:Q",
            title="inter-key distance |s1 − s2| (tokens)",
            axis=token_axis(),
            scale=alt.Scale(nice=False),
        ),
        x2="dx_end:Q",
        y=alt.Y(
            "dm_tokens:Q",
            title="query to key-midpoint distance (tokens)",
            axis=token_axis(),
            scale=alt.Scale(nice=False),
        ),
        y2="dm_end:Q",
        tooltip=[
            alt.Tooltip("model:N", title="model"),
            alt.Tooltip("model_id:N", title="model id"),
            alt.Tooltip("dx_tokens:Q", title="inter-key distance from (tokens)"),
            alt.Tooltip("dm_tokens:Q", title="key-to-query distance from (tokens)"),
            alt.Tooltip("ap_mean:Q", title="AP (pooled)", format=".3f"),
            alt.Tooltip("n:Q", title="pairs", format=","),
            alt.Tooltip("n_heads:Q", title="heads"),
            alt.Tooltip("state:N", title="cell"),
        ],
    )
    cells = (
        base.transform_filter("!datum.masked")
        .mark_rect()
        .encode(
            color=alt.Color(
                "ap_mean:Q",
                title="AP (pooled over heads)",
                scale=alt.Scale(scheme="viridis", domain=[0, 1]),
                legend=alt.Legend(gradientLength=220),
            )
        )
    )
    masked = base.transform_filter("datum.masked").mark_rect(color="#e6e6e6")
    return alt.layer(masked, cells, data=table_of(rows)).properties(
        width=420,
        height=380,
        title=alt.Title(
            f"{name}: plasticity by key spacing and distance to the query",
            subtitle=f"cell = Σ sum_pp / Σ n over heads and query buckets; bins of {w:,} tokens; "
            f"grey = fewer than n_min pairs (masked)",
        ),
    )


DECILES = [f"decile_{k}" for k in range(10)]


def _decile_rows(row: dict[str, Any], ctx: int | None) -> list[dict[str, Any]]:
    out = []
    for k in range(10):
        v = row.get(f"decile_{k}")
        if v is None:
            continue
        rec = {"decile": k, "ap": v, "rel": (k + 0.5) / 10}
        if ctx:
            rec["tokens"] = (k + 0.5) / 10 * ctx
        out.append(rec)
    return out


def head_profiles(marts: Marts, model_id: str) -> Drawn:
    heads = [
        r for r in marts.rows("head_metrics", "model_id = ?", [model_id]) if r["has_plasticity"]
    ]
    model = marts.rows("model_summary", "model_id = ? AND n_heads_plasticity > 0", [model_id])
    if not heads:
        raise NoData(f"{model_id}: no head plasticity profiles")
    ci = Intervals(marts, DECILES)
    ctx = heads[0].get("context_length")
    name = marts.display(model_id)
    data = []
    for r in heads:
        for d in _decile_rows(r, ctx):
            data.append(
                {
                    **d,
                    "model_id": model_id,
                    "model": name,
                    "head_label": r["head_label"],
                    "layer": r["layer"],
                    "q_head": r["q_head"],
                    "k_head": r["k_head"],
                    "series": "one head",
                    "ci_low": None,
                    "ci_high": None,
                    "interval": None,
                }
            )
    for r in model:
        for d in _decile_rows(r, ctx):
            data.append(
                {
                    **d,
                    "model_id": model_id,
                    "model": name,
                    "head_label": "model mean",
                    "layer": None,
                    "q_head": None,
                    "k_head": None,
                    "series": f"model mean ({r['n_heads_plasticity']} heads)",
                    **ci.fields(model_id, f"decile_{d['decile']}"),
                }
            )
    xfield = "tokens:Q" if ctx else "rel:Q"
    xtitle = (
        "query position, decile centre (tokens)"
        if ctx
        else "query position, decile centre (share of context)"
    )
    series = sorted({d["series"] for d in data}, key=lambda s: s != "one head")
    x = alt.X(
        xfield,
        title=xtitle,
        axis=token_axis() if ctx else alt.Axis(format="%"),
        scale=alt.Scale(domain=[0, ctx] if ctx else [0, 1], nice=False),
    )
    base = alt.Chart().encode(
        x=x,
        y=alt.Y("ap:Q", title=AP_TITLE, scale=alt.Scale(domain=[0, 1])),
        detail="head_label:N",
        color=alt.Color(
            "series:N",
            title=None,
            sort=series,
            scale=alt.Scale(domain=series, range=["#9e9e9e", "#d62728"][: len(series)]),
        ),
        tooltip=head_tooltip(
            alt.Tooltip("decile:O", title="decile"),
            alt.Tooltip("ap:Q", title="AP", format=".3f"),
            alt.Tooltip("interval:N", title="model interval"),
        ),
    )
    grey = base.transform_filter("datum.series == 'one head'").mark_line(
        strokeWidth=1, opacity=0.55
    )
    band = (
        alt.Chart()
        .transform_filter("datum.series != 'one head' && datum.ci_low != null")
        .mark_area(color="#d62728", opacity=0.18)
        .encode(x=x, y=alt.Y("ci_low:Q", title=AP_TITLE), y2="ci_high:Q")
    )
    red = base.transform_filter("datum.series != 'one head'").mark_line(
        strokeWidth=3, point=alt.OverlayMarkDef(size=40, filled=True)
    )
    chart = alt.layer(grey, band, red, data=table_of(data)).properties(
        width=480,
        height=300,
        title=alt.Title(
            f"{name}: plasticity profile of every head",
            subtitle=[
                "head decile values (n-weighted over query buckets); red = model "
                "mean over heads, band = its interval",
                AP_MEANING,
            ],
        ),
    )
    return Drawn(chart, ci.caption("Red band"))


def component_weights(marts: Marts) -> alt.FacetChart:
    rows = require(
        finite(marts.rows("component_weights_model"), "component_weight"),
        "component_weights_model is empty",
    )
    rows = marts.tag(rows)
    look = model_look(marts, {r["model_id"] for r in rows})
    ds = sorted({r["d"] for r in rows})
    one_model = all(len({r["model_id"] for r in rows if r["d"] == d}) == 1 for d in ds)
    xtitle = "head-dimension index (rotate-half layout: i and i + d/2 share a RoPE frequency)"
    base = alt.Chart().encode(
        x=alt.X("component:Q", title=xtitle, scale=alt.Scale(nice=False)),
        y=alt.Y(
            "component_weight:Q", title="mean positional weight (share)", axis=alt.Axis(format="%")
        ),
        detail="model:N",
    )
    tooltip = model_tooltip(
        alt.Tooltip("component:Q", title="dimension"),
        alt.Tooltip("rope_pair_index:Q", title="RoPE pair"),
        alt.Tooltip("component_weight:Q", title="mean weight", format=".2%"),
        alt.Tooltip("component_weight_sd:Q", title="sd over heads", format=".2%"),
        alt.Tooltip("component_r2:Q", title="mean R²", format=".3f"),
        alt.Tooltip("n_heads:Q", title="heads"),
    )
    if one_model:
        # one bar per dimension [i, i + 1): x2 instead of a bin, so each panel keeps its own range
        layer = (
            base.transform_calculate(component_end="datum.component + 1")
            .mark_rect(stroke="white", strokeWidth=0.5)
            .encode(
                x2="component_end:Q",
                y2=alt.datum(0),
                color=look.color(),
                opacity=look.opacity(),
                tooltip=tooltip,
            )
            .add_params(look.selection)
        )
        layers = [layer]
    else:
        line = base.mark_line(strokeWidth=1.6).encode(color=look.color(), opacity=look.opacity())
        pts = (
            base.mark_point(filled=True, size=14)
            .encode(color=look.color(), opacity=look.opacity(), tooltip=tooltip)
            .add_params(look.selection)
        )
        layers = [line, pts]
    chart = (
        alt.layer(*layers)
        .properties(width=560, height=220)
        .facet(
            row=alt.Row(
                "d:O",
                title=None,
                sort=ds,
                header=alt.Header(
                    labelExpr="'d = ' + datum.value",
                    labelAngle=0,
                    labelAlign="left",
                    labelOrient="top",
                    labelFontWeight="bold",
                ),
            ),
            data=table_of(rows),
        )
    )
    return chart.resolve_scale(x="independent").properties(
        title=alt.Title(
            "Positional component weights by head dimension",
            subtitle="w = max(R², 0) / Σ max(R², 0) of the query–position regression per dimension, "
            "mean over heads (queries only)",
        )
    )


def decile_profiles(marts: Marts) -> Drawn:
    rows = marts.tag(marts.rows("model_summary", "n_heads_plasticity > 0"))
    ci = Intervals(marts, DECILES)
    data = []
    for r in rows:
        for d in _decile_rows(r, None):
            data.append(
                {
                    **d,
                    "model_id": r["model_id"],
                    "model": r["model"],
                    "family": r["family"],
                    "n_heads": r["n_heads_plasticity"],
                    "ctx": r.get("context_length"),
                    **ci.fields(r["model_id"], f"decile_{d['decile']}"),
                }
            )
    require(data, "model_summary has no model deciles")
    look = model_look(marts, {d["model_id"] for d in data})
    x = alt.X(
        "rel:Q",
        title="query position, decile centre (share of the context window)",
        axis=alt.Axis(format="%", values=[0, 0.2, 0.4, 0.6, 0.8, 1.0]),
        scale=alt.Scale(domain=[0, 1], nice=False),
    )
    base = alt.Chart(table_of(data)).encode(x=x, detail="model:N")
    y = alt.Y("ap:Q", title=AP_TITLE, scale=alt.Scale(zero=False))
    band = (
        base.transform_filter("datum.ci_low != null")
        .mark_area(interpolate="linear")
        .encode(
            y=along(y, "ci_low:Q"),
            y2="ci_high:Q",
            color=look.color(),
            opacity=look.opacity(0.16, 0.02),
        )
    )
    lines = base.mark_line(strokeWidth=2).encode(y=y, color=look.color(), opacity=look.opacity())
    pts = point_marks(
        base,
        size=40,
        y=y,
        color=look.color(),
        shape=look.shape(),
        opacity=look.opacity(),
        tooltip=model_tooltip(
            alt.Tooltip("decile:O", title="decile"),
            alt.Tooltip("ap:Q", title="AP", format=".4f"),
            alt.Tooltip("interval:N", title="interval"),
            alt.Tooltip("ctx:Q", title="context (tokens)", format=","),
            alt.Tooltip("n_heads:Q", title="heads"),
        ),
    )
    chart = alt.layer(band, lines, pts[0].add_params(look.selection), pts[1]).properties(
        width=520,
        height=320,
        title=alt.Title(
            "Plasticity decile profiles across models",
            subtitle=[
                "model decile = mean over heads of the head's n-weighted decile value; band = "
                "its interval; click a model in the legend to pick it",
                AP_MEANING,
            ],
        ),
    )
    return Drawn(chart, ci.caption("Bands"))


register(
    FigureDef(
        "ap-heatmap",
        SECTION,
        "Plasticity heatmap (inter-key × key-to-query distance)",
        "Pooled plasticity per (inter-key distance, key-to-query distance) cell; masked cells "
        "have fewer than n_min pairs.",
        ("plasticity_heatmap_model",),
        heatmap,
        per_model=True,
        order=1,
    ),
    FigureDef(
        "ap-head-profiles",
        SECTION,
        "Per-head plasticity profiles with the model mean",
        "Every head's plasticity along the context (grey) and the model mean (red) with its "
        "interval.",
        ("head_metrics", "model_summary", "model_metric_ci"),
        head_profiles,
        per_model=True,
        order=2,
    ),
    FigureDef(
        "ap-component-weights",
        SECTION,
        "Component weights by head dimension",
        "Which head dimensions carry the query position signal. "
        "Means over heads, drawn without an interval (component weights are not "
        "bootstrapped; the tooltip gives the sd over heads).",
        ("component_weights_model",),
        component_weights,
        order=3,
    ),
    FigureDef(
        "ap-decile-profiles",
        SECTION,
        "Decile profiles across models",
        "Model plasticity per decile of the context window, one colour per model, with intervals.",
        ("model_summary", "model_metric_ci"),
        decile_profiles,
        order=4,
    ),
)
