"""Combined QK PCA figures (seed 001, figures qk-pca/01–06; spec §2.1, §3, §4)."""

from __future__ import annotations

from typing import Any

import altair as alt

from qkwh.reports.base import (
    table_of,
    TAXONOMY_COLORS,
    TAXONOMY_LABELS,
    FigureDef,
    Marts,
    NoData,
    family_color,
    family_opacity,
    finite,
    head_tooltip,
    model_sort,
    require,
)
from qkwh.reports.charts import depth_heatmap, qk_collage
from qkwh.reports.vectors import collage_records

SECTION = "PCA"
N_PC = 10


def _per_pc(marts: Marts, fields: dict[str, str]) -> list[dict[str, Any]]:
    """model_summary's per-pc columns (``<prefix>_<pc>``) in long form: one row per model, pc
    and quantity."""
    out = []
    for r in marts.rows("model_summary"):
        for pc in range(N_PC):
            for prefix, label in fields.items():
                v = r.get(f"{prefix}_{pc}")
                if v is not None:
                    out.append({"model_id": r["model_id"], "family": r["family"] or "unknown",
                                "pc": pc, "quantity": label, "value": v,
                                "n_heads": r.get("n_heads_pca")})
    return out


def pc_roles(marts: Marts) -> alt.FacetChart:
    data = require(_per_pc(marts, {"r_q": "queries: mean r_q", "r_k": "keys: mean r_k"}),
                   "model_summary has no per-PC correlations (no PCA results)")
    color, sel = family_color(marts)
    base = alt.Chart().encode(
        x=alt.X("pc:O", title="principal component (index)", axis=alt.Axis(labelAngle=0)),
        y=alt.Y("value:Q", title="mean Pearson r with token position",
                scale=alt.Scale(domain=[-1, 1])),
        detail="model_id:N",
    )
    lines = base.mark_line(strokeWidth=2).encode(color=color, opacity=family_opacity(sel))
    points = base.mark_point(filled=True, size=45).encode(
        color=color, opacity=family_opacity(sel),
        tooltip=[alt.Tooltip("model_id:N", title="model"), "family:N",
                 alt.Tooltip("pc:O", title="PC"), alt.Tooltip("quantity:N", title="quantity"),
                 alt.Tooltip("value:Q", title="mean r", format=".3f"),
                 alt.Tooltip("n_heads:Q", title="heads")])
    zero = alt.Chart().mark_rule(color="#888", strokeDash=[3, 3]).encode(y=alt.datum(0))
    layered = alt.layer(zero, lines, points.add_params(sel)).properties(width=330, height=260)
    return layered.facet(
        column=alt.Column("quantity:N", title=None, sort=["queries: mean r_q", "keys: mean r_k"]),
        data=table_of(data),
    ).properties(title=alt.Title(
        "PC roles: how strongly each principal component tracks position",
        subtitle="mean over each model's heads of the sign-canonicalised Pearson r of the PC score "
                 "with token position (r_q ≥ 0 by construction)"))


def explained_variance(marts: Marts) -> alt.Chart:
    data = require(_per_pc(marts, {"ev": "explained variance"}),
                   "model_summary has no explained-variance columns (no PCA results)")
    color, sel = family_color(marts)
    base = alt.Chart(table_of(data)).encode(
        x=alt.X("pc:O", title="principal component (index)", axis=alt.Axis(labelAngle=0)),
        y=alt.Y("value:Q", title="mean explained variance (share of pooled Q+K variance)",
                axis=alt.Axis(format="%")),
        detail="model_id:N",
    )
    lines = base.mark_line(strokeWidth=2).encode(color=color, opacity=family_opacity(sel))
    points = base.mark_point(filled=True, size=45).encode(
        color=color, opacity=family_opacity(sel),
        tooltip=[alt.Tooltip("model_id:N", title="model"), "family:N", alt.Tooltip("pc:O", title="PC"),
                 alt.Tooltip("value:Q", title="mean explained variance", format=".1%"),
                 alt.Tooltip("n_heads:Q", title="heads")])
    return alt.layer(lines, points.add_params(sel)).properties(
        width=460, height=280,
        title=alt.Title("Explained variance per principal component",
                        subtitle="mean over heads of λ_i / Σλ of the pooled Q+K PCA"))


def rq_rk_scatter(marts: Marts) -> alt.Chart:
    rows = require(finite(marts.rows("head_taxonomy"), "r_q0", "r_k0"),
                   "head_taxonomy is empty (no PCA results)")
    for r in rows:
        r["family"] = r.get("family") or "unknown"
        r["class"] = TAXONOMY_LABELS.get(r.get("taxonomy") or "", r.get("taxonomy"))
    color, sel = family_color(marts)
    x_lo = min(0.0, min(r["r_q0"] for r in rows))
    pts = alt.Chart(table_of(rows)).mark_circle(size=55).encode(
        x=alt.X("r_q0:Q", title="r_q0: query PC0 score vs position (Pearson r)",
                scale=alt.Scale(domain=[round(x_lo - 0.05, 1), 1])),
        y=alt.Y("r_k0:Q", title="r_k0: key PC0 score vs position (Pearson r)",
                scale=alt.Scale(domain=[-1, 1])),
        color=color, opacity=family_opacity(sel),
        tooltip=head_tooltip("family:N", alt.Tooltip("r_q0:Q", format=".3f"),
                             alt.Tooltip("r_k0:Q", format=".3f"),
                             alt.Tooltip("class:N", title="taxonomy")),
    ).add_params(sel)
    rules = []
    for v in (0.3, 0.7):
        rules.append(alt.Chart().mark_rule(color="#999", strokeDash=[4, 3]).encode(x=alt.datum(v)))
        rules.append(alt.Chart().mark_rule(color="#999", strokeDash=[4, 3]).encode(y=alt.datum(v)))
        rules.append(alt.Chart().mark_rule(color="#999", strokeDash=[4, 3]).encode(y=alt.datum(-v)))
    return alt.layer(*rules, pts).properties(
        width=440, height=400,
        title=alt.Title("Query vs key position signal on PC0, per head",
                        subtitle="dashed lines: taxonomy thresholds 0.3 / 0.7 (spec §3)"))


def _depth(marts: Marts, value: str, **kw: Any) -> alt.Chart:
    rows = marts.rows("head_taxonomy")
    return depth_heatmap(marts, rows, value, **kw)


def depth_rq0(marts: Marts) -> alt.Chart:
    return _depth(marts, "r_q0", title="Query position signal r_q0 by layer depth",
                  legend_title="mean r_q0 (Pearson r)", scheme="viridis", domain=[0, 1])


def depth_rk0(marts: Marts) -> alt.Chart:
    return _depth(marts, "r_k0", title="Key position signal r_k0 by layer depth",
                  legend_title="mean r_k0 (Pearson r)", scheme="blueorange", domain=[-1, 1],
                  diverging=True)


def taxonomy(marts: Marts) -> alt.Chart:
    rows = require([r for r in marts.rows("taxonomy_fractions", "scope_kind = 'model'")
                    if r.get("n_total")], "taxonomy_fractions has no per-model rows")
    for r in rows:
        r["class"] = TAXONOMY_LABELS.get(r["taxonomy"], r["taxonomy"])
    classes = sorted({(r["class_order"], r["taxonomy"]) for r in rows})
    labels = [TAXONOMY_LABELS.get(t, t) for _, t in classes]
    colors = [TAXONOMY_COLORS.get(t, "#bbb") for _, t in classes]
    order = [m for m in model_sort(marts) if any(r["model_id"] == m for r in rows)]
    return alt.Chart(table_of(rows)).mark_bar().encode(
        y=alt.Y("model_id:N", sort=order, title="model"),
        x=alt.X("fraction:Q", title="share of the model's heads (%)", axis=alt.Axis(format="%", values=[0, 0.2, 0.4, 0.6, 0.8, 1]),
                scale=alt.Scale(domain=[0, 1])),
        color=alt.Color("class:N", scale=alt.Scale(domain=labels, range=colors),
                        sort=labels, title="head class"),
        order=alt.Order("class_order:Q"),
        tooltip=[alt.Tooltip("model_id:N", title="model"), alt.Tooltip("class:N", title="class"),
                 alt.Tooltip("n_heads:Q", title="heads"), alt.Tooltip("n_total:Q", title="of heads"),
                 alt.Tooltip("fraction:Q", title="share", format=".1%")],
    ).properties(width=460, height=alt.Step(30), title=alt.Title(
        "Head taxonomy: share of heads per class",
        subtitle="classes from PC0 r_q and |r_k| with thresholds 0.3 / 0.7 (spec §3)"))


def collage(marts: Marts, model_id: str) -> alt.FacetChart:
    picked, records = collage_records(marts, "pca_axes", model_id, ("mean", "pc0", "pc1"),
                                      [("z0", "pc0"), ("z1", "pc1")], center=True)
    ctx = _context_length(marts, model_id)
    return qk_collage(
        records, x="z0", y="z1", x_title="PC0 score (x − mean)·v0 (raw units)",
        y_title="PC1 score (x − mean)·v1 (raw units)", context_length=ctx,
        title=f"{model_id}: queries and keys in the PC0/PC1 plane",
        subtitle=f"4 heads drawn with random.Random(42).sample; ≤ {marts.max_points} rows per kind "
                 "per head; shade = token position",
        panel_sort=[h.label for h in picked], constants={"model": model_id})


def _context_length(marts: Marts, model_id: str) -> int | None:
    rows = marts.query("SELECT context_length FROM model_summary WHERE model_id = ?", [model_id])
    return rows[0]["context_length"] if rows else None


FIGURES: tuple[FigureDef, ...] = (
    FigureDef("pca-pc-roles", SECTION, "PC roles: mean r_q and r_k per principal component",
              "How much each of the 10 PCs of the pooled Q+K PCA tracks token position, for queries "
              "and keys (qk-pca/01).", ("model_summary",), pc_roles),
    FigureDef("pca-rq-rk-scatter", SECTION, "r_q0 vs r_k0 per head, by family",
              "Each dot is a head; families occupy distinct regions of the (r_q, r_k) plane "
              "(qk-pca/02).", ("head_taxonomy",), rq_rk_scatter),
    FigureDef("pca-depth-rq0", SECTION, "Layer-depth heatmap of r_q0",
              "Mean query PC0–position correlation per model and relative depth (qk-pca/03).",
              ("head_taxonomy",), depth_rq0),
    FigureDef("pca-depth-rk0", SECTION, "Layer-depth heatmap of r_k0",
              "Mean key PC0–position correlation per model and relative depth (qk-pca/04).",
              ("head_taxonomy",), depth_rk0),
    FigureDef("pca-explained-variance", SECTION, "Explained variance per principal component",
              "Mean explained-variance ratio of each PC of the pooled Q+K PCA (qk-pca/05).",
              ("model_summary",), explained_variance),
    FigureDef("pca-collage", SECTION, "Q/K collage in the PC0/PC1 plane",
              "Queries and keys of four seeded random heads projected on their PC0/PC1 axes "
              "(qk-pca/06).", ("pca_axes", "files (vectors)", "model_summary"), collage, per_model=True),
    FigureDef("pca-taxonomy", SECTION, "Head taxonomy fractions",
              "Share of heads per taxonomy class for each model (qk-pca/08, spec §3).",
              ("taxonomy_fractions",), taxonomy),
)
