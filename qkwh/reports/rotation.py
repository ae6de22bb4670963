"""Planar-rotation figures (seeds 000 and 002, figures qk-rotation/01–08; spec §2.2)."""

from __future__ import annotations

import random
from typing import Any

import altair as alt

from qkwh.reports.base import (
    table_of,
    FigureDef,
    Marts,
    NoData,
    family_color,
    family_scale,
    family_opacity,
    finite,
    head_tooltip,
    model_sort,
    require,
)
from qkwh.reports.charts import depth_heatmap, qk_collage
from qkwh.reports.vectors import axes_of, collage_records, heads_with_axes, project

SECTION = "Rotation"

# Per-head metrics: the head_metrics mart (one row per head).
HEAD_MART = "head_metrics"


def head_rows(marts: Marts, *cols: str) -> list[dict[str, Any]]:
    rows = finite(marts.rows(HEAD_MART), *cols)
    for r in rows:
        r["family"] = r.get("family") or "unknown"
    return rows


def _summary(marts: Marts, *cols: str) -> list[dict[str, Any]]:
    rows = finite(marts.rows("model_summary"), *cols)
    for r in rows:
        r["family"] = r.get("family") or "unknown"
    return rows


def _model_tooltip(*extra: Any) -> list[Any]:
    return [alt.Tooltip("model_id:N", title="model"), alt.Tooltip("family:N"),
            alt.Tooltip("n_heads_rotation:Q", title="heads"), *extra]


# ---------------------------------------------------------------------------------------------


def ab_collage(marts: Marts, model_id: str) -> alt.FacetChart:
    picked, records = collage_records(marts, "rotation_axes", model_id, ("a", "b"),
                                      [("pa", "a"), ("pb", "b")], center=False)
    ctx = marts.query("SELECT context_length FROM model_summary WHERE model_id = ?", [model_id])
    return qk_collage(
        records, x="pa", y="pb", x_title="a·x: drift axis a (raw projection units)",
        y_title="b·x: separation axis b (raw projection units)",
        context_length=ctx[0]["context_length"] if ctx else None,
        title=f"{model_id}: queries and keys in the {{a, b}} rotation plane",
        subtitle=f"4 heads drawn with random.Random(42).sample; raw (uncentred) projections; "
                 f"≤ {marts.max_points} rows per kind per head; shade = token position",
        panel_sort=[h.label for h in picked], constants={"model": model_id})


def abs_r_per_model(marts: Marts) -> alt.Chart:
    rows = require(_summary(marts, "abs_r_q_a", "abs_r_k_a"), "model_summary has no rotation means")
    data = []
    for r in rows:
        for col, label in (("abs_r_q_a", "queries |r_q_a|"), ("abs_r_k_a", "keys |r_k_a|")):
            data.append({"model_id": r["model_id"], "family": r["family"], "quantity": label,
                         "value": r[col], "n_heads_rotation": r.get("n_heads_rotation")})
    order = [m for m in model_sort(marts) if any(d["model_id"] == m for d in data)]
    return alt.Chart(table_of(data)).mark_bar().encode(
        x=alt.X("model_id:N", sort=order, title="model", axis=alt.Axis(labelAngle=-35)),
        xOffset=alt.XOffset("quantity:N", sort=["queries |r_q_a|", "keys |r_k_a|"]),
        y=alt.Y("value:Q", title="mean |r| of a-projection with position",
                scale=alt.Scale(domain=[0, 1])),
        color=alt.Color("quantity:N", title="kind", sort=["queries |r_q_a|", "keys |r_k_a|"],
                        scale=alt.Scale(range=["#2f6db5", "#d9480f"])),
        tooltip=_model_tooltip(alt.Tooltip("quantity:N", title="quantity"),
                               alt.Tooltip("value:Q", title="mean |r|", format=".3f")),
    ).properties(width=alt.Step(max(40, min(110, 700 // max(len(order), 1)))), height=280, title=alt.Title(
        "Position signal on the drift axis a: queries vs keys",
        subtitle="mean over heads of |r_q_a| and |r_k_a| per model (qk-rotation/02)"))


def variance_decomposition(marts: Marts) -> alt.Chart:
    rows = require(_summary(marts, "var_frac_a", "var_frac_b", "plane_var_fraction"),
                   "model_summary has no variance fractions")
    parts = (("var_frac_a", "axis a (drift)", 1), ("var_frac_b", "axis b (separation)", 2),
             ("complement", "complement (d − 2 dims)", 3))
    data = []
    for r in rows:
        vals = {"var_frac_a": r["var_frac_a"], "var_frac_b": r["var_frac_b"],
                "complement": 1.0 - r["plane_var_fraction"]}
        for col, label, k in parts:
            data.append({"model_id": r["model_id"], "family": r["family"], "part": label,
                         "k": k, "value": vals[col], "n_heads_rotation": r.get("n_heads_rotation"),
                         "plane": r["plane_var_fraction"]})
    order = [m for m in model_sort(marts) if any(d["model_id"] == m for d in data)]
    labels = [p[1] for p in parts]
    return alt.Chart(table_of(data)).mark_bar().encode(
        y=alt.Y("model_id:N", sort=order, title="model"),
        x=alt.X("value:Q", title="share of pooled Q+K variance (%)", axis=alt.Axis(format="%", values=[0, 0.2, 0.4, 0.6, 0.8, 1]),
                scale=alt.Scale(domain=[0, 1]), stack="zero"),
        color=alt.Color("part:N", sort=labels, title="direction",
                        scale=alt.Scale(domain=labels, range=["#e45756", "#4c78a8", "#c9ccd1"])),
        order=alt.Order("k:Q"),
        tooltip=_model_tooltip(alt.Tooltip("part:N", title="direction"),
                               alt.Tooltip("value:Q", title="share", format=".1%"),
                               alt.Tooltip("plane:Q", title="plane_var_fraction", format=".1%")),
    ).properties(width=460, height=alt.Step(30), title=alt.Title(
        "Variance decomposition: {a, b} plane vs complement",
        subtitle="mean var_frac_a, var_frac_b and 1 − plane_var_fraction per model (qk-rotation/03)"))


def bias_distribution(marts: Marts) -> alt.Chart:
    rows = require(head_rows(marts, "bias_strength"), "no head has a bias_strength")
    for r in rows:
        r["bias_e3"] = r["bias_strength"] * 1e3
    color, sel = family_color(marts, title="family")
    fams = sorted({r["family"] for r in rows})
    hist = alt.Chart().mark_bar(opacity=0.85, binSpacing=0).encode(
        x=alt.X("bias_e3:Q", bin=alt.Bin(maxbins=40),
                title="bias_strength × 10³ (attention-score units per token)"),
        y=alt.Y("count():Q", title="heads (count)", axis=alt.Axis(tickMinStep=1, format="d")),
        color=alt.Color("family:N", scale=family_scale(marts.families()), legend=None),
        tooltip=[alt.Tooltip("family:N"), alt.Tooltip("count():Q", title="heads"),
                 alt.Tooltip("bias_e3:Q", bin=alt.Bin(maxbins=40), title="bias × 10³ bin")],
    )
    zero = alt.Chart().mark_rule(color="#333", strokeDash=[4, 3]).encode(x=alt.datum(0))
    return alt.layer(hist, zero).properties(width=440, height=110).facet(
        row=alt.Row("family:N", title=None, sort=fams,
                    header=alt.Header(labelAngle=0, labelAlign="left", labelFontWeight="bold")),
        data=table_of(rows),
    ).resolve_scale(y="independent").properties(title=alt.Title(
        "bias_strength distribution per family",
        subtitle="bias_strength = mu_q_a · alpha_k; positive = later keys favoured (qk-rotation/04)"))


def slope_ratio(marts: Marts) -> alt.Chart:
    rows = require(_summary(marts, "slope_ratio_kq_median"), "model_summary has no slope ratios")
    color, sel = family_color(marts)
    order = [m for m in model_sort(marts) if any(r["model_id"] == m for r in rows)]
    bars = alt.Chart().mark_bar().encode(
        y=alt.Y("model_id:N", sort=order, title="model"),
        x=alt.X("slope_ratio_kq_median:Q", title="median |alpha_k| / |alpha_q| (ratio)",
                scale=alt.Scale(zero=True)),
        color=color, opacity=family_opacity(sel, off=0.15),
        tooltip=_model_tooltip(alt.Tooltip("slope_ratio_kq_median:Q", title="median ratio", format=".2f")),
    ).add_params(sel)
    one = alt.Chart().mark_rule(color="#333", strokeDash=[4, 3]).encode(x=alt.datum(1))
    return alt.layer(bars, one, data=table_of(rows)).properties(
        width=420, height=alt.Step(26), title=alt.Title(
            "Key-to-query drift slope ratio",
            subtitle="median over heads of |alpha_k| / |alpha_q|; dashed line = equal slopes "
                     "(qk-rotation/05)"))


def depth_abs_rka(marts: Marts) -> alt.Chart:
    rows = head_rows(marts, "abs_r_k_a")
    return depth_heatmap(marts, rows, "abs_r_k_a", title="Key drift signal |r_k_a| by layer depth",
                         legend_title="mean |r_k_a| (Pearson r)", scheme="viridis", domain=[0, 1])


def depth_bias(marts: Marts) -> alt.Chart:
    rows = head_rows(marts, "bias_strength")
    for r in rows:
        r["bias_e3"] = r["bias_strength"] * 1e3
    return depth_heatmap(marts, rows, "bias_e3", title="bias_strength by layer depth",
                         legend_title="mean bias × 10³ (score/token)", scheme="purpleorange",
                         diverging=True, fmt=".1f")


def bias_vs_separation(marts: Marts) -> alt.Chart:
    rows = require(head_rows(marts, "bias_strength", "separation_strength"),
                   "no head has both bias_strength and separation_strength")
    for r in rows:
        r["bias_e3"] = r["bias_strength"] * 1e3
    color, sel = family_color(marts)
    corr = [c for c in marts.rows("family_correlations",
                                  "x_metric = 'bias_strength' AND y_metric = 'separation_strength'")
            if c["scope_kind"] in ("all", "family")] if marts.has("family_correlations") else []
    lines = []
    for c in sorted(corr, key=lambda c: (c["scope_kind"] != "all", c["scope"])):
        r = "n/a" if c["pearson_r"] is None else f"{c['pearson_r']:+.2f}"
        who = "all heads" if c["scope_kind"] == "all" else c["scope"]
        lines.append(f"{who}: r = {r} (n = {c['n']})")
    if corr:
        # family_correlations covers every ingested model; say so when a subset is shown.
        note = "Pearson r from family_correlations (over every ingested head)"
    else:
        note = "no family_correlations mart: r not shown"
    base = alt.Chart().encode(
        x=alt.X("separation_strength:Q", title="separation_strength (share of E|q − k|² on axis b)",
                scale=alt.Scale(zero=False)),
        y=alt.Y("bias_e3:Q", title="bias_strength × 10³ (score units per token)",
                scale=alt.Scale(zero=False)),
    )
    pts = base.mark_circle(size=50).encode(
        color=color, opacity=family_opacity(sel, on=0.7),
        tooltip=head_tooltip("family:N",
                             alt.Tooltip("separation_strength:Q", format=".3f"),
                             alt.Tooltip("bias_strength:Q", format=".3e")),
    ).add_params(sel)
    fits = base.transform_filter(sel).transform_regression(
        "separation_strength", "bias_e3", groupby=["family"]
    ).mark_line(strokeWidth=2.5).encode(color=color)
    return alt.layer(pts, fits, data=table_of(rows)).properties(
        width=460, height=360, title=alt.Title(
            "bias_strength vs separation_strength (Simpson's paradox check)",
            subtitle=["lines: least-squares fit within each family; " + note] + lines[:8]))


def complement_collage(marts: Marts, model_id: str) -> alt.FacetChart:
    if not marts.has("rotation_axes"):
        raise NoData("the warehouse has no rotation_axes")
    heads = heads_with_axes(marts, "rotation_axes", model_id, ("mean", "w0", "w1"))
    if not heads:
        raise NoData(f"{model_id}: no head has stored complement axes (rotation_axes mean, w0, w1, …)")
    # the first head of the seeds' draw random.Random(42).sample(heads, 4)
    head = random.Random(42).sample(heads, min(4, len(heads)))[0]
    names = [r[0] for r in marts.con.execute(
        "SELECT axis FROM rotation_axes WHERE model_id = ? AND layer = ? AND q_head = ? "
        "AND regexp_full_match(axis, 'w[0-9]+')", [model_id, head.layer, head.q_head]).fetchall()]
    idx = sorted(int(n[1:]) for n in names)
    n_pairs = min(30, sum(1 for i in range(0, len(idx), 2) if i + 1 in idx and i in idx))
    if n_pairs == 0:
        raise NoData(f"{model_id} {head.label}: fewer than two complement axes")
    axes = axes_of(marts, "rotation_axes", model_id, head,
                   ["mean"] + [f"w{j}" for j in range(2 * n_pairs)])
    pairs = {}
    if marts.has("rotation_pairs"):
        for p in marts.query("SELECT pair, sv_var_share, angle_r_circ_pm, active FROM rotation_pairs "
                             "WHERE model_id = ? AND layer = ? AND q_head = ?",
                             [model_id, head.layer, head.q_head]):
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
            records.append({"panel": tag, "kind": rec["kind"], "position": rec["position"],
                            "u": rec[f"u{i}"], "v": rec[f"v{i}"]})
    ctx = marts.query("SELECT context_length FROM model_summary WHERE model_id = ?", [model_id])
    return qk_collage(
        records, x="u", y="v", x_title="w_2i score (raw units)", y_title="w_2i+1 score (raw units)",
        context_length=ctx[0]["context_length"] if ctx else None,
        title=f"{model_id} {head.label}: complement of the {{a, b}} plane, SVD pairs",
        subtitle=[f"pair i: x = (x − mean)·w_2i, y = (x − mean)·w_2i+1 (raw units), w = complement SVD "
                  f"directions; ≤ {pts} rows per kind",
                  "rings shaded by position are RoPE rotation planes; variance share and 'active' "
                  "from rotation_pairs"],
        columns=6, panel=150, panel_sort=labels, size=10, axis_titles=False, panel_title="plane",
        constants={"model": model_id, "head": head.label})


FIGURES: tuple[FigureDef, ...] = (
    FigureDef("rot-ab-collage", SECTION, "{a, b} plane collage",
              "Queries and keys of four seeded random heads on the drift axis a and the separation "
              "axis b (qk-rotation/01).", ("rotation_axes", "files (vectors)", "model_summary"),
              ab_collage, per_model=True),
    FigureDef("rot-abs-r", SECTION, "|r_q_a| vs |r_k_a| per model",
              "Mean position correlation of queries and keys on the drift axis (qk-rotation/02).",
              ("model_summary",), abs_r_per_model),
    FigureDef("rot-variance", SECTION, "Variance decomposition (a, b, complement)",
              "Share of pooled Q+K variance on a, on b and in the complement (qk-rotation/03).",
              ("model_summary",), variance_decomposition),
    FigureDef("rot-bias-distribution", SECTION, "bias_strength distribution per family",
              "Histogram of per-head bias_strength × 10³ per family (qk-rotation/04).",
              (HEAD_MART,), bias_distribution),
    FigureDef("rot-slope-ratio", SECTION, "K/Q drift slope ratio",
              "Median |alpha_k| / |alpha_q| per model (qk-rotation/05).", ("model_summary",),
              slope_ratio),
    FigureDef("rot-depth-abs-rka", SECTION, "Layer-depth heatmap of |r_k_a|",
              "Mean |r_k_a| per model and relative depth (qk-rotation/06, left).",
              (HEAD_MART,), depth_abs_rka),
    FigureDef("rot-depth-bias", SECTION, "Layer-depth heatmap of bias_strength",
              "Mean bias_strength × 10³ per model and relative depth (qk-rotation/06, right).",
              (HEAD_MART,), depth_bias),
    FigureDef("rot-bias-vs-separation", SECTION, "bias_strength vs separation_strength",
              "Per-head scatter with within-family fits and Pearson r (Simpson's paradox, "
              "qk-rotation/07).", (HEAD_MART, "family_correlations"), bias_vs_separation),
    FigureDef("rot-complement-collage", SECTION, "Complement-pair collage",
              "The complement SVD pairs of one seeded random head: RoPE rotation planes appear as "
              "rings (qk-rotation/08).", ("rotation_axes", "rotation_pairs", "files (vectors)"),
              complement_collage, per_model=True),
)
