"""Combined QK PCA figures (figures qk-pca/01–08; docs/metrics/pca.md, docs/metrics/aggregation.md)."""

from __future__ import annotations

from typing import Any

import altair as alt

from qkwh.reports.base import (
    Drawn,
    FigureDef,
    Marts,
    finite,
    head_tooltip,
    model_look,
    model_sort,
    model_tooltip,
    require,
    table_of,
)
from qkwh.reports.catalogue import register, section
from qkwh.reports.charts import class_shares, depth_heatmap, qk_collage, taxonomy_classes
from qkwh.reports.intervals import Intervals, errorbar, point_marks
from qkwh.reports.vectors import collage_records

SECTION = section("PCA", order=10)
N_PC = 10


def _per_pc(marts: Marts, fields: dict[str, str]) -> tuple[list[dict[str, Any]], Intervals]:
    """model_summary's per-pc columns (``<prefix>_<pc>``) in long form: one row per model, pc
    and quantity, with the interval of metric ``<prefix>_<pc>`` from model_metric_ci."""
    ci = Intervals(marts, [f"{p}_{pc}" for p in fields for pc in range(N_PC)])
    out = []
    for r in marts.rows("model_summary"):
        for pc in range(N_PC):
            for prefix, label in fields.items():
                v = r.get(f"{prefix}_{pc}")
                if v is not None:
                    out.append(
                        {
                            "model_id": r["model_id"],
                            "pc": pc,
                            "quantity": label,
                            "value": v,
                            "n_heads": r.get("n_heads_pca"),
                            **ci.fields(r["model_id"], f"{prefix}_{pc}"),
                        }
                    )
    return marts.tag(out), ci


def _pc_layers(marts: Marts, data: list[dict[str, Any]], y: alt.Y, value_fmt: str) -> list[Any]:
    """Lines, error bars and points of per-PC model values, one colour per model."""
    look = model_look(marts, {d["model_id"] for d in data})
    base = alt.Chart().encode(
        x=alt.X("pc:O", title="principal component (index)", axis=alt.Axis(labelAngle=0)),
        xOffset=alt.XOffset("model:N", sort=list(look.models), scale=alt.Scale(paddingOuter=0.6)),
        detail="model:N",
    )
    lines = base.mark_line(strokeWidth=2).encode(y=y, color=look.color(), opacity=look.opacity())
    bars = errorbar(base, y, thickness=1.4).encode(
        color=look.color(), opacity=look.opacity(0.8, 0.05)
    )
    pts = point_marks(
        base,
        size=45,
        y=y,
        color=look.color(),
        shape=look.shape(),
        opacity=look.opacity(),
        tooltip=model_tooltip(
            alt.Tooltip("pc:O", title="PC"),
            alt.Tooltip("quantity:N", title="quantity"),
            alt.Tooltip("value:Q", title="mean", format=value_fmt),
            alt.Tooltip("interval:N", title="interval"),
            alt.Tooltip("n_heads:Q", title="heads"),
        ),
    )
    return [lines, bars, pts[0].add_params(look.selection), pts[1]]


def pc_roles(marts: Marts) -> Drawn:
    data, ci = _per_pc(marts, {"r_q": "queries: mean r_q", "r_k": "keys: mean r_k"})
    require(data, "model_summary has no per-PC correlations (no PCA results)")
    y = alt.Y(
        "value:Q", title="mean Pearson r with token position", scale=alt.Scale(domain=[-1, 1])
    )
    zero = alt.Chart().mark_rule(color="#888", strokeDash=[3, 3]).encode(y=alt.datum(0))
    layered = alt.layer(zero, *_pc_layers(marts, data, y, ".3f")).properties(width=330, height=260)
    chart = layered.facet(
        column=alt.Column("quantity:N", title=None, sort=["queries: mean r_q", "keys: mean r_k"]),
        data=table_of(data),
    ).properties(
        title=alt.Title(
            "PC roles: how strongly each principal component tracks position",
            subtitle="mean over each model's heads of the sign-canonicalised Pearson r of the PC score "
            "with token position (r_q ≥ 0 by construction); bars = interval of the mean",
        )
    )
    return Drawn(chart, ci.caption())


def explained_variance(marts: Marts) -> Drawn:
    data, ci = _per_pc(marts, {"ev": "explained variance"})
    require(data, "model_summary has no explained-variance columns (no PCA results)")
    y = alt.Y(
        "value:Q",
        title="mean explained variance (share of pooled Q+K variance)",
        axis=alt.Axis(format="%"),
    )
    chart = alt.layer(*_pc_layers(marts, data, y, ".1%"), data=table_of(data)).properties(
        width=460,
        height=280,
        title=alt.Title(
            "Explained variance per principal component",
            subtitle="mean over heads of λ_i / Σλ of the pooled Q+K PCA; bars = interval "
            "of the mean",
        ),
    )
    return Drawn(chart, ci.caption())


def rq_rk_scatter(marts: Marts) -> alt.Chart:
    rows = require(
        finite(marts.rows("head_taxonomy"), "r_q0", "r_k0"),
        "head_taxonomy is empty (no PCA results)",
    )
    rows = marts.tag(marts.sample(rows, "heads"))
    tax = taxonomy_classes(marts)
    for r in rows:
        r["class"] = tax.label(r.get("taxonomy"))
    look = model_look(marts, {r["model_id"] for r in rows})
    x_lo = min(0.0, min(r["r_q0"] for r in rows))
    pts = (
        alt.Chart(table_of(rows))
        .mark_point(filled=True, size=55)
        .encode(
            x=alt.X(
                "r_q0:Q",
                title="r_q0: query PC0 score vs position (Pearson r)",
                scale=alt.Scale(domain=[round(x_lo - 0.05, 1), 1]),
            ),
            y=alt.Y(
                "r_k0:Q",
                title="r_k0: key PC0 score vs position (Pearson r)",
                scale=alt.Scale(domain=[-1, 1]),
            ),
            color=look.color(),
            shape=look.shape(),
            opacity=look.opacity(0.8, 0.06),
            tooltip=head_tooltip(
                "family:N",
                alt.Tooltip("r_q0:Q", format=".3f"),
                alt.Tooltip("r_k0:Q", format=".3f"),
                alt.Tooltip("class:N", title="taxonomy"),
            ),
        )
        .add_params(look.selection)
    )
    rules = []
    for v in (tax.low, tax.high):
        rules.append(alt.Chart().mark_rule(color="#999", strokeDash=[4, 3]).encode(x=alt.datum(v)))
        rules.append(alt.Chart().mark_rule(color="#999", strokeDash=[4, 3]).encode(y=alt.datum(v)))
        rules.append(alt.Chart().mark_rule(color="#999", strokeDash=[4, 3]).encode(y=alt.datum(-v)))
    return alt.layer(*rules, pts).properties(
        width=440,
        height=400,
        title=alt.Title(
            "Query vs key position signal on PC0, per head",
            subtitle="colour = model, shape = family; dashed lines: taxonomy thresholds "
            + tax.thresholds,
        ),
    )


def depth_rq0(marts: Marts) -> alt.Chart:
    return depth_heatmap(
        marts,
        "r_q0",
        title="Query position signal r_q0 by layer depth",
        legend_title="mean r_q0 (Pearson r)",
        scheme="viridis",
        domain=[0, 1],
    )


def depth_rk0(marts: Marts) -> alt.Chart:
    return depth_heatmap(
        marts,
        "r_k0",
        title="Key position signal r_k0 by layer depth",
        legend_title="mean r_k0 (Pearson r)",
        scheme="blueorange",
        domain=[-1, 1],
        diverging=True,
    )


def taxonomy(marts: Marts) -> Drawn:
    rows = require(
        [r for r in marts.rows("taxonomy_fractions", "scope_kind = 'model'") if r.get("n_total")],
        "taxonomy_fractions has no per-model rows",
    )
    tax = taxonomy_classes(marts)
    ci = Intervals(marts, [f"frac_{t}" for t in tax.classes])
    for r in rows:
        r["class"] = tax.label(r["taxonomy"])
        r.update(ci.fields(r["model_id"], f"frac_{r['taxonomy']}"))
    rows = marts.tag(rows)
    order = model_sort(marts, {r["model_id"] for r in rows})
    chart = class_shares(
        tax, rows, alt.Y("model:N", sort=order, title="model"), width=130, height=alt.Step(22)
    )
    return Drawn(
        chart.properties(
            title=alt.Title(
                "Head taxonomy: share of heads per class",
                subtitle=f"classes from PC0 r_q and |r_k| with thresholds {tax.thresholds}; black bars = "
                "interval of each share",
            )
        ),
        ci.caption("Black bars"),
    )


def collage(marts: Marts, model_id: str) -> alt.FacetChart:
    picked, records = collage_records(
        marts,
        "pca_axes",
        model_id,
        ("mean", "pc0", "pc1"),
        [("z0", "pc0"), ("z1", "pc1")],
        center=True,
    )
    name = marts.display(model_id)
    return qk_collage(
        records,
        x="z0",
        y="z1",
        x_title="PC0 score (x − mean)·v0 (raw units)",
        y_title="PC1 score (x − mean)·v1 (raw units)",
        context_length=marts.context_length(model_id),
        title=f"{name}: queries and keys in the PC0/PC1 plane",
        subtitle=f"4 heads drawn with random.Random(42).sample; ≤ {marts.max_points} rows per kind "
        "per head; shade = token position",
        panel_sort=[h.label for h in picked],
        constants={"model": name, "model_id": model_id},
    )


FIGURES = register(
    FigureDef(
        "pca-pc-roles",
        SECTION,
        "PC roles: mean r_q and r_k per principal component",
        "How much each of the 10 PCs of the pooled Q+K PCA tracks token position, for queries "
        "and keys, one colour per model.",
        ("model_summary", "model_metric_ci"),
        pc_roles,
    ),
    FigureDef(
        "pca-rq-rk-scatter",
        SECTION,
        "r_q0 vs r_k0 per head, by model",
        "Each mark is a head (colour = model, shape = family); families occupy distinct "
        "regions of the (r_q, r_k) plane.",
        ("head_taxonomy", "taxonomy_classes"),
        rq_rk_scatter,
    ),
    FigureDef(
        "pca-depth-rq0",
        SECTION,
        "Layer-depth heatmap of r_q0",
        "Mean query PC0–position correlation per model and relative depth; "
        "cells are means over the heads of a depth bin, drawn without an interval.",
        ("depth_profile",),
        depth_rq0,
    ),
    FigureDef(
        "pca-depth-rk0",
        SECTION,
        "Layer-depth heatmap of r_k0",
        "Mean key PC0–position correlation per model and relative depth; "
        "cells are means over the heads of a depth bin, drawn without an interval.",
        ("depth_profile",),
        depth_rk0,
    ),
    FigureDef(
        "pca-explained-variance",
        SECTION,
        "Explained variance per principal component",
        "Mean explained-variance ratio of each PC of the pooled Q+K PCA.",
        ("model_summary", "model_metric_ci"),
        explained_variance,
    ),
    FigureDef(
        "pca-collage",
        SECTION,
        "Q/K collage in the PC0/PC1 plane",
        "Queries and keys of four seeded random heads projected on their PC0/PC1 axes.",
        ("pca_axes (vectors reader)", "files (vectors reader)", "model_summary"),
        collage,
        per_model=True,
    ),
    FigureDef(
        "pca-taxonomy",
        SECTION,
        "Head taxonomy fractions",
        "Share of heads per taxonomy class for each model, with intervals.",
        ("taxonomy_fractions", "taxonomy_classes", "model_metric_ci"),
        taxonomy,
    ),
)
