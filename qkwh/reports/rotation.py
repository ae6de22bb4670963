"""Planar-rotation figures (figures qk-rotation/01–08; docs/metrics/rotation.md)."""

from __future__ import annotations

import random
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
    model_sort,
    model_tooltip,
    pick,
    require,
    table_of,
)
from qkwh.reports.catalogue import register, section
from qkwh.reports.charts import depth_heatmap, qk_collage
from qkwh.reports.intervals import Intervals, along, errorbar, pct
from qkwh.reports.vectors import axes_of, collage_records, complement_axes, heads_with_axes, project

SECTION = section("Rotation", order=20)

# Per-head metrics: the head_metrics mart (one row per head).
HEAD_MART = "head_metrics"


HEAD_KEYS = ("model_id", "layer", "q_head", "k_head", "head_label", "depth_bin")


def head_rows(marts: Marts, *cols: str) -> list[dict[str, Any]]:
    """Head rows of head_metrics with ``cols`` all set (only the keys and ``cols`` kept)."""
    return marts.tag(pick(finite(marts.rows(HEAD_MART), *cols), *HEAD_KEYS, *cols))


def _summary(marts: Marts, *cols: str) -> list[dict[str, Any]]:
    return marts.tag(finite(marts.rows("model_summary"), *cols))


def _model_tooltip(*extra: Any) -> list[Any]:
    return model_tooltip(alt.Tooltip("n_heads_rotation:Q", title="heads"), *extra)


# ---------------------------------------------------------------------------------------------


def ab_collage(marts: Marts, model_id: str) -> alt.FacetChart:
    picked, records = collage_records(
        marts, "rotation_axes", model_id, ("a", "b"), [("pa", "a"), ("pb", "b")], center=False
    )
    name = marts.display(model_id)
    return qk_collage(
        records,
        x="pa",
        y="pb",
        x_title="a·x: drift axis a (raw projection units)",
        y_title="b·x: separation axis b (raw projection units)",
        context_length=marts.context_length(model_id),
        title=f"{name}: queries and keys in the {{a, b}} rotation plane",
        subtitle=f"4 heads drawn with random.Random(42).sample; raw (uncentred) projections; "
        f"≤ {marts.max_points} rows per kind per head; shade = token position",
        panel_sort=[h.label for h in picked],
        constants={"model": name, "model_id": model_id},
    )


def abs_r_per_model(marts: Marts) -> Drawn:
    rows = require(_summary(marts, "abs_r_q_a", "abs_r_k_a"), "model_summary has no rotation means")
    ci = Intervals(marts, ["abs_r_q_a", "abs_r_k_a"])
    kinds = ["queries |r_q_a|", "keys |r_k_a|"]
    data = []
    for r in rows:
        for col, label in zip(("abs_r_q_a", "abs_r_k_a"), kinds):
            data.append(
                {
                    "model_id": r["model_id"],
                    "model": r["model"],
                    "family": r["family"],
                    "quantity": label,
                    "value": r[col],
                    "n_heads_rotation": r.get("n_heads_rotation"),
                    **ci.fields(r["model_id"], col),
                }
            )
    order = model_sort(marts, {d["model_id"] for d in data})
    base = alt.Chart().encode(
        x=alt.X("model:N", sort=order, title="model", axis=alt.Axis(labelAngle=-35)),
        xOffset=alt.XOffset("quantity:N", sort=kinds),
    )
    y = alt.Y(
        "value:Q", title="mean |r| of a-projection with position", scale=alt.Scale(domain=[0, 1])
    )
    bars = base.mark_bar().encode(
        y=y,
        color=alt.Color(
            "quantity:N",
            title="kind",
            sort=kinds,
            scale=alt.Scale(domain=kinds, range=["#2f6db5", "#d9480f"]),
        ),
        tooltip=_model_tooltip(
            alt.Tooltip("quantity:N", title="quantity"),
            alt.Tooltip("value:Q", title="mean |r|", format=".3f"),
            alt.Tooltip("interval:N", title="interval"),
        ),
    )
    chart = alt.layer(
        bars, errorbar(base, y, color="#111", thickness=1.4), data=table_of(data)
    ).properties(
        width=min(1100, max(320, 110 * len(order))),
        height=280,
        title=alt.Title(
            "Position signal on the drift axis a: queries vs keys",
            subtitle="mean over heads of |r_q_a| and |r_k_a| per model, black bars = interval of the "
            "mean",
        ),
    )
    return Drawn(chart, ci.caption("Black bars"))


def variance_decomposition(marts: Marts) -> Drawn:
    rows = require(
        _summary(marts, "var_frac_a", "var_frac_b", "plane_var_fraction"),
        "model_summary has no variance fractions",
    )
    ci = Intervals(marts, ["var_frac_a", "plane_var_fraction"])
    parts = (
        ("var_frac_a", "axis a (drift)", 1),
        ("var_frac_b", "axis b (separation)", 2),
        ("complement", "complement (d − 2 dims)", 3),
    )
    data, ends = [], []
    for r in rows:
        vals = {
            "var_frac_a": r["var_frac_a"],
            "var_frac_b": r["var_frac_b"],
            "complement": 1.0 - r["plane_var_fraction"],
        }
        for col, label, k in parts:
            data.append(
                {
                    "model_id": r["model_id"],
                    "model": r["model"],
                    "family": r["family"],
                    "part": label,
                    "k": k,
                    "value": vals[col],
                    "n_heads_rotation": r.get("n_heads_rotation"),
                    "plane": r["plane_var_fraction"],
                }
            )
        # whiskers where two stacked values end: a (var_frac_a) and a + b (plane_var_fraction)
        for col, label in (
            ("var_frac_a", "var_frac_a"),
            ("plane_var_fraction", "plane_var_fraction"),
        ):
            ends.append(
                {
                    "model_id": r["model_id"],
                    "model": r["model"],
                    "family": r["family"],
                    "part": label,
                    "value": r[col],
                    "n_heads_rotation": r.get("n_heads_rotation"),
                    **ci.fields(r["model_id"], col),
                }
            )
    order = model_sort(marts, {d["model_id"] for d in data})
    labels = [p[1] for p in parts]
    y = alt.Y("model:N", sort=order, title="model")
    x = alt.X(
        "value:Q",
        title="share of pooled Q+K variance (%)",
        axis=alt.Axis(format="%", values=[0, 0.2, 0.4, 0.6, 0.8, 1]),
        scale=alt.Scale(domain=[0, 1]),
        stack="zero",
    )
    stack = (
        alt.Chart(table_of(data))
        .mark_bar()
        .encode(
            y=y,
            x=x,
            color=alt.Color(
                "part:N",
                sort=labels,
                title="direction",
                scale=alt.Scale(domain=labels, range=["#e45756", "#4c78a8", "#c9ccd1"]),
            ),
            order=alt.Order("k:Q"),
            tooltip=_model_tooltip(
                alt.Tooltip("part:N", title="direction"),
                alt.Tooltip("value:Q", title="share", format=".1%"),
                alt.Tooltip("plane:Q", title="plane_var_fraction", format=".1%"),
            ),
        )
    )
    whisk = errorbar(
        alt.Chart(table_of(ends)).encode(
            y=y,
            tooltip=_model_tooltip(
                alt.Tooltip("part:N", title="value"),
                alt.Tooltip("value:Q", title="mean", format=".1%"),
                alt.Tooltip("interval:N", title="interval"),
            ),
        ),
        x,
        color="#111",
        thickness=1.6,
    )
    chart = alt.layer(stack, whisk).properties(
        width=460,
        height=alt.Step(30),
        title=alt.Title(
            "Variance decomposition: {a, b} plane vs complement",
            subtitle=[
                "mean var_frac_a, var_frac_b and 1 − plane_var_fraction per model",
                "black bars: interval of var_frac_a (at the end of a) and of plane_var_fraction "
                "(at the end of b)",
            ],
        ),
    )
    return Drawn(chart, ci.caption("Black bars"))


def bias_distribution(marts: Marts) -> Drawn:
    rows = require(head_rows(marts, "bias_strength"), "no head has a bias_strength")
    for r in rows:
        r["bias_e3"] = r["bias_strength"] * 1e3
    models = [m for m in marts.models if any(r["model_id"] == m for r in rows)]
    look = model_look(marts, models)
    ci = Intervals(marts, ["bias_strength"])
    means = marts.tag(
        [
            {
                "model_id": r["model_id"],
                "bias_e3": r["bias_strength"] * 1e3,
                "n_heads_rotation": r.get("n_heads_rotation"),
                **ci.fields(r["model_id"], "bias_strength", lambda v: v * 1e3),
            }
            for r in marts.rows("model_summary")
            if r["model_id"] in models and r.get("bias_strength") is not None
        ]
    )
    order = model_sort(marts, models)
    for r in rows:
        r["kind"] = "head"
    for m in means:
        m["kind"] = "mean"
    xtitle = "bias_strength × 10³ (attention-score units per token)"
    hist = (
        alt.Chart()
        .transform_filter("datum.kind == 'head'")
        .mark_bar(opacity=0.85, binSpacing=0)
        .encode(
            x=alt.X("bias_e3:Q", bin=alt.Bin(maxbins=40), title=xtitle),
            y=alt.Y("count():Q", title="heads", axis=alt.Axis(tickMinStep=1, format="d")),
            color=look.color(legend=False),
            tooltip=[
                alt.Tooltip("model:N", title="model"),
                alt.Tooltip("model_id:N", title="model id"),
                alt.Tooltip("count():Q", title="heads"),
                alt.Tooltip("bias_e3:Q", bin=alt.Bin(maxbins=40), title="bias × 10³ bin"),
            ],
        )
    )
    mean_base = alt.Chart().transform_filter("datum.kind == 'mean'")
    band = (
        mean_base.transform_filter("datum.ci_low != null")
        .mark_rect(color="#111", opacity=0.18)
        .encode(x=alt.X("ci_low:Q", title=xtitle), x2="ci_high:Q")
    )
    mean = mean_base.mark_rule(color="#111", strokeWidth=2).encode(
        x=alt.X("bias_e3:Q", title=xtitle),
        tooltip=_model_tooltip(
            alt.Tooltip("bias_e3:Q", title="mean bias × 10³", format=".3f"),
            alt.Tooltip("interval:N", title="interval (× 10³)"),
        ),
    )
    zero = alt.Chart().mark_rule(color="#777", strokeDash=[4, 3]).encode(x=alt.datum(0))
    chart = (
        alt.layer(hist, band, mean, zero)
        .properties(width=440, height=70)
        .facet(
            row=alt.Row(
                "model:N",
                title=None,
                sort=order,
                header=alt.Header(
                    labelAngle=0,
                    labelAlign="left",
                    labelAnchor="start",
                    labelFontWeight="bold",
                    labelOrient="top",
                ),
            ),
            data=table_of(rows + means),
            spacing=8,
        )
        .resolve_scale(y="independent")
        .properties(
            title=alt.Title(
                "bias_strength distribution per model",
                subtitle=[
                    "bias_strength = mu_q_a · alpha_k; positive = later keys favoured",
                    "black line: the model mean, grey band: its interval",
                ],
            )
        )
    )
    return Drawn(chart, ci.caption("Grey bands"))


def slope_ratio(marts: Marts) -> Drawn:
    rows = require(_summary(marts, "slope_ratio_kq_median"), "model_summary has no slope ratios")
    ci = Intervals(marts, ["slope_ratio_kq_median"])
    for r in rows:
        r.update(ci.fields(r["model_id"], "slope_ratio_kq_median"))
    look = model_look(marts, {r["model_id"] for r in rows})
    order = model_sort(marts, {r["model_id"] for r in rows})
    base = alt.Chart().encode(y=alt.Y("model:N", sort=order, title="model"))
    x = alt.X(
        "slope_ratio_kq_median:Q",
        title="median |alpha_k| / |alpha_q| (ratio)",
        scale=alt.Scale(zero=True),
    )
    bars = (
        base.mark_bar(height={"band": 0.7})
        .encode(
            x=x,
            color=look.color(),
            opacity=look.opacity(0.9, 0.15),
            tooltip=_model_tooltip(
                alt.Tooltip("slope_ratio_kq_median:Q", title="median ratio", format=".2f"),
                alt.Tooltip("interval:N", title="interval"),
            ),
        )
        .add_params(look.selection)
    )
    one = alt.Chart().mark_rule(color="#333", strokeDash=[4, 3]).encode(x=alt.datum(1))
    chart = alt.layer(bars, errorbar(base, x, color="#111"), one, data=table_of(rows)).properties(
        width=420,
        height=alt.Step(26),
        title=alt.Title(
            "Key-to-query drift slope ratio",
            subtitle="median over heads of |alpha_k| / |alpha_q|, black bars = interval of the median; "
            "dashed line = equal slopes",
        ),
    )
    return Drawn(chart, ci.caption("Black bars"))


def depth_abs_rka(marts: Marts) -> alt.Chart:
    return depth_heatmap(
        marts,
        "abs_r_k_a",
        title="Key drift signal |r_k_a| by layer depth",
        legend_title="mean |r_k_a| (Pearson r)",
        scheme="viridis",
        domain=[0, 1],
    )


def depth_bias(marts: Marts) -> alt.Chart:
    return depth_heatmap(
        marts,
        "bias_strength",
        title="bias_strength by layer depth",
        legend_title="mean bias × 10³ (score/token)",
        scheme="purpleorange",
        diverging=True,
        fmt=".1f",
        scale=1e3,
    )


def _corr_line(c: dict[str, Any], who: str) -> str:
    if c.get("pearson_r") is None:
        return f"{who}: r = n/a (n = {c['n']})"
    ci = []
    if c.get("fisher_ci_low") is not None:
        ci.append(f"Fisher-z [{c['fisher_ci_low']:+.2f}, {c['fisher_ci_high']:+.2f}]")
    if c.get("boot_ci_low") is not None:
        ci.append(f"bootstrap [{c['boot_ci_low']:+.2f}, {c['boot_ci_high']:+.2f}]")
    return (
        f"{who}: r = {c['pearson_r']:+.2f}"
        + (f" ({'; '.join(ci)})" if ci else "")
        + f", n = {c['n']}"
    )


def bias_vs_separation(marts: Marts) -> Drawn:
    rows = marts.sample(
        require(
            head_rows(marts, "bias_strength", "separation_strength"),
            "no head has both bias_strength and separation_strength",
        ),
        "heads",
    )
    for r in rows:
        r["bias_e3"] = r["bias_strength"] * 1e3
    look = model_look(marts, {r["model_id"] for r in rows})
    corr = (
        marts.rows(
            "family_correlations", "x_metric = 'bias_strength' AND y_metric = 'separation_strength'"
        )
        if marts.has("family_correlations")
        else []
    )
    shown_models = set(marts.models)
    pooled = [c for c in corr if c["scope_kind"] in ("all", "family")]
    per_model = [c for c in corr if c["scope_kind"] == "model" and c["scope"] in shown_models]
    lines = []
    for c in sorted(pooled, key=lambda c: (c["scope_kind"] != "all", c["scope"])):
        lines.append(_corr_line(c, "all heads" if c["scope_kind"] == "all" else c["scope"]))
    model_lines = [
        _corr_line(c, marts.display(c["scope"]))
        for c in sorted(per_model, key=lambda c: marts.models.index(c["scope"]))
    ]
    x = alt.X(
        "separation_strength:Q",
        title="separation_strength (share of E|q − k|² on axis b)",
        scale=alt.Scale(zero=False),
    )
    y = alt.Y(
        "bias_e3:Q",
        title="bias_strength × 10³ (score units per token)",
        scale=alt.Scale(zero=False),
    )
    base = alt.Chart().transform_filter("isValid(datum.layer)").encode(x=x, y=y)
    # least-squares lines of the head_metric_fits mart: within each shown model, and over all heads
    fit_rows = (
        marts.rows(
            "head_metric_fits",
            "response = 'bias_strength' AND predictor = "
            "'separation_strength' AND scope_kind IN ('all', 'model')",
        )
        if marts.has("head_metric_fits")
        else []
    )
    line = []
    for f in fit_rows:
        if f.get("slope") is None or (
            f["scope_kind"] == "model" and f["scope"] not in shown_models
        ):
            continue
        for fx, fy in ((f["x_min"], f["y_at_x_min"]), (f["x_max"], f["y_at_x_max"])):
            rec = {"fit_scope": f["scope_kind"], "fit_x": fx, "fit_e3": fy * 1e3}
            if f["scope_kind"] == "model":
                rec.update(model_id=f["scope"], model=marts.display(f["scope"]))
            line.append(rec)
    fit = alt.Chart().mark_line().encode(x=along(x, "fit_x:Q"), y=along(y, "fit_e3:Q"))
    pts = (
        base.mark_point(filled=True, size=50)
        .encode(
            color=look.color(),
            shape=look.shape(),
            opacity=look.opacity(0.7, 0.06),
            tooltip=head_tooltip(
                "family:N",
                alt.Tooltip("separation_strength:Q", format=".3f"),
                alt.Tooltip("bias_strength:Q", format=".3e"),
            ),
        )
        .add_params(look.selection)
    )
    fits = (
        fit.transform_filter("datum.fit_scope == 'model'")
        .transform_filter(look.selection)
        .mark_line(strokeWidth=2.5)
        .encode(color=look.color())
    )
    overall = fit.transform_filter("datum.fit_scope == 'all'").mark_line(
        color="#111", strokeDash=[6, 4], strokeWidth=1.8
    )
    lvl = next((c["level"] for c in corr if c.get("level") is not None), None)
    note = (
        f"Pearson r with {pct(lvl) + ' ' if lvl else ''}Fisher-z and layer-cluster bootstrap "
        "intervals (family_correlations, over every ingested head of the scope)"
        if corr
        else "no family_correlations mart: r not shown"
    )
    chart = alt.layer(pts, fits, overall, data=table_of(rows + line)).properties(
        width=480,
        height=380,
        title=alt.Title(
            "bias_strength vs separation_strength (Simpson's paradox check)",
            subtitle=[
                "coloured lines: least-squares fit within each model; black dashed: over every "
                "ingested head (head_metric_fits)",
                note,
            ]
            + lines[:8],
        ),
    )
    caption = ""
    if corr:
        caption = (
            "Correlations (family_correlations): Pearson r with its "
            + (pct(lvl) + " " if lvl else "")
            + "Fisher-z interval (heads as independent points) and its layer-cluster "
            "bootstrap interval (each model's layers redrawn, B = "
            + ", ".join(sorted({f"{c['n_boot']:,}" for c in corr if c.get("n_boot")}))
            + "). "
            + "; ".join(lines + model_lines)
            + "."
        )
    return Drawn(chart, caption)


def complement_collage(marts: Marts, model_id: str) -> alt.FacetChart:
    heads = heads_with_axes(marts, "rotation_axes", model_id, ("mean", "w0", "w1"))
    if not heads:
        raise NoData(
            f"{model_id}: no head has stored complement axes (rotation_axes mean, w0, w1, …)"
        )
    # the first head of the draw random.Random(42).sample(heads, 4) (as for the other collages)
    head = random.Random(42).sample(heads, min(4, len(heads)))[0]
    idx = complement_axes(marts, model_id, head)
    n_pairs = min(30, sum(1 for i in range(0, len(idx), 2) if i + 1 in idx and i in idx))
    if n_pairs == 0:
        raise NoData(f"{model_id} {head.label}: fewer than two complement axes")
    axes = axes_of(
        marts, "rotation_axes", model_id, head, ["mean"] + [f"w{j}" for j in range(2 * n_pairs)]
    )
    pairs = {}
    if marts.has("head_rotation_pairs"):
        for p in marts.rows(
            "head_rotation_pairs",
            "model_id = ? AND layer = ? AND q_head = ?",
            [model_id, head.layer, head.q_head],
        ):
            pairs[p["pair"]] = p
    pts = min(marts.max_points, 250)
    dims = []
    for i in range(n_pairs):
        dims += [(f"u{i}", f"w{2 * i}"), (f"v{i}", f"w{2 * i + 1}")]
    flat = project(marts, model_id, head, axes, dims, center=True, max_points=pts)
    records, labels = [], []
    for i in range(n_pairs):
        p = pairs.get(i, {})
        share = p.get("sv_var_share")
        tag = f"pair {i}" + (f" · {share:.1%} var" if share is not None else "")
        if p.get("active") is not None:
            tag += " · active" if p["active"] else " · inactive"
        labels.append(tag)
        for rec in flat:
            records.append(
                {
                    "panel": tag,
                    "kind": rec["kind"],
                    "position": rec["position"],
                    "u": rec[f"u{i}"],
                    "v": rec[f"v{i}"],
                }
            )
    name = marts.display(model_id)
    return qk_collage(
        records,
        x="u",
        y="v",
        x_title="w_2i score (raw units)",
        y_title="w_2i+1 score (raw units)",
        context_length=marts.context_length(model_id),
        title=f"{name} {head.label}: complement of the {{a, b}} plane, SVD pairs",
        subtitle=[
            f"pair i: x = (x − mean)·w_2i, y = (x − mean)·w_2i+1 (raw units), w = complement SVD "
            f"directions; ≤ {pts} rows per kind",
            "rings shaded by position are RoPE rotation planes; variance share and 'active' "
            "from head_rotation_pairs",
        ],
        columns=6,
        panel=150,
        panel_sort=labels,
        size=10,
        axis_titles=False,
        panel_title="plane",
        constants={"model": name, "model_id": model_id, "head": head.label},
    )


FIGURES = register(
    FigureDef(
        "rot-ab-collage",
        SECTION,
        "{a, b} plane collage",
        "Queries and keys of four seeded random heads on the drift axis a and the separation "
        "axis b.",
        ("rotation_axes (vectors reader)", "files (vectors reader)", "model_summary"),
        ab_collage,
        per_model=True,
    ),
    FigureDef(
        "rot-abs-r",
        SECTION,
        "|r_q_a| vs |r_k_a| per model",
        "Mean position correlation of queries and keys on the drift axis, with intervals.",
        ("model_summary", "model_metric_ci"),
        abs_r_per_model,
    ),
    FigureDef(
        "rot-variance",
        SECTION,
        "Variance decomposition (a, b, complement)",
        "Share of pooled Q+K variance on a, on b and in the complement, with intervals.",
        ("model_summary", "model_metric_ci"),
        variance_decomposition,
    ),
    FigureDef(
        "rot-bias-distribution",
        SECTION,
        "bias_strength distribution per model",
        "Histogram of per-head bias_strength × 10³, one row per model, with the model mean "
        "and its interval.",
        (HEAD_MART, "model_summary", "model_metric_ci"),
        bias_distribution,
    ),
    FigureDef(
        "rot-slope-ratio",
        SECTION,
        "K/Q drift slope ratio",
        "Median |alpha_k| / |alpha_q| per model, with intervals.",
        ("model_summary", "model_metric_ci"),
        slope_ratio,
    ),
    FigureDef(
        "rot-depth-abs-rka",
        SECTION,
        "Layer-depth heatmap of |r_k_a|",
        "Mean |r_k_a| per model and relative depth; cells are means "
        "over the heads of a depth bin, drawn without an interval.",
        ("depth_profile",),
        depth_abs_rka,
    ),
    FigureDef(
        "rot-depth-bias",
        SECTION,
        "Layer-depth heatmap of bias_strength",
        "Mean bias_strength × 10³ per model and relative depth; cells "
        "are means over the heads of a depth bin, drawn without an interval.",
        ("depth_profile",),
        depth_bias,
    ),
    FigureDef(
        "rot-bias-vs-separation",
        SECTION,
        "bias_strength vs separation_strength",
        "Per-head scatter with within-model fits and Pearson r with intervals (Simpson's paradox).",
        (HEAD_MART, "head_metric_fits", "family_correlations"),
        bias_vs_separation,
    ),
    FigureDef(
        "rot-complement-collage",
        SECTION,
        "Complement-pair collage",
        "The complement SVD pairs of one seeded random head: RoPE rotation planes appear as rings.",
        (
            "rotation_axes (vectors reader)",
            "head_rotation_pairs",
            "files (vectors reader)",
            "model_summary",
        ),
        complement_collage,
        per_model=True,
    ),
)
