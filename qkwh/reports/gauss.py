"""Gaussian vs empirical plasticity (``ap-gauss-vs-empirical``): per-bucket scatter with the
identity line, the gap by layer depth, and each model's gap with its interval."""

from __future__ import annotations

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
    table_of,
)
from qkwh.reports.catalogue import register
from qkwh.reports.charts import depth_rows
from qkwh.reports.intervals import Intervals, along, errorbar, point_marks
from qkwh.reports.plasticity import NO_EMPIRICAL, SECTION

SCATTER_CAP = 3000  # buckets drawn in the Gaussian-vs-empirical scatter (Marts.sample)


def gauss_vs_empirical(marts: Marts) -> Drawn:
    if not marts.has("plasticity_buckets_gap"):
        raise NoData(NO_EMPIRICAL)
    buckets = finite(marts.rows("plasticity_buckets_gap"), "ap_bucket", "ap_bucket_empirical")
    if not buckets:
        raise NoData(NO_EMPIRICAL)
    n_all = len(buckets)
    buckets = marts.tag(
        pick(
            marts.sample(buckets, "buckets", ("layer", "q_head", "q_bucket"), SCATTER_CAP),
            "model_id",
            "head_label",
            "layer",
            "q_head",
            "k_head",
            "q_bucket",
            "bucket_position",
            "ap_bucket",
            "ap_bucket_empirical",
            "gauss_gap",
            "gauss_gap_se",
        )
    )
    try:
        depth_means = depth_rows(marts, "gauss_gap")
    except NoData:
        depth_means = []
    models = [m for m in marts.models if any(b["model_id"] == m for b in buckets)]
    look = model_look(marts, models)
    ci = Intervals(marts, ["gauss_gap"])
    summary = [r for r in marts.rows("model_summary") if r.get("gauss_gap") is not None]
    level = [
        {
            "model_id": r["model_id"],
            "gauss_gap": r["gauss_gap"],
            "n_heads": r.get("n_heads_plasticity"),
            **ci.fields(r["model_id"], "gauss_gap"),
        }
        for r in summary
        if r["model_id"] in models
    ]
    level = marts.tag(level)

    # 1. per-bucket scatter with the identity line
    lo = min(min(b["ap_bucket"], b["ap_bucket_empirical"]) for b in buckets)
    hi = max(max(b["ap_bucket"], b["ap_bucket_empirical"]) for b in buckets)
    pad = 0.02 * (hi - lo or 1.0)
    dom = [max(0.0, lo - pad), min(1.0, hi + pad)]
    gx = alt.X(
        "ap_bucket:Q",
        title="Gaussian AP per bucket (closed form)",
        scale=alt.Scale(domain=dom, nice=False),
    )
    gy = alt.Y(
        "ap_bucket_empirical:Q",
        title="empirical AP per bucket (real queries)",
        scale=alt.Scale(domain=dom, nice=False),
    )
    ident = (
        alt.Chart(table_of([{"v": dom[0]}, {"v": dom[1]}]))
        .mark_line(color="#333", strokeDash=[5, 3], clip=True)
        .encode(x=along(gx, "v:Q"), y=along(gy, "v:Q"))
    )
    scatter = (
        alt.Chart(table_of(buckets))
        .mark_point(filled=True, size=22)
        .encode(
            x=gx,
            y=gy,
            color=look.color(),
            shape=look.shape(),
            opacity=look.opacity(0.55, 0.03),
            tooltip=head_tooltip(
                alt.Tooltip("q_bucket:Q", title="query bucket"),
                alt.Tooltip("bucket_position:Q", title="bucket position (tokens)", format=",.0f"),
                alt.Tooltip("ap_bucket:Q", title="Gaussian AP", format=".4f"),
                alt.Tooltip("ap_bucket_empirical:Q", title="empirical AP", format=".4f"),
                alt.Tooltip("gauss_gap:Q", title="gap (G − E)", format="+.4f"),
                alt.Tooltip("gauss_gap_se:Q", title="gap SE", format=".4f"),
            ),
        )
        .add_params(look.selection)
    )
    left = alt.layer(ident, scatter).properties(
        width=330,
        height=330,
        title=alt.Title("Per bucket: Gaussian vs empirical", subtitle="dashed line: equal (gap 0)"),
    )

    # 2. gap by layer depth: mean over the heads of each depth bin
    depth = alt.Chart(table_of(depth_means)).encode(
        x=alt.X(
            "depth_mid:Q",
            title="relative depth layer / (layers − 1), bin centre",
            scale=alt.Scale(domain=[0, 1], nice=False),
            axis=alt.Axis(values=[0, 0.2, 0.4, 0.6, 0.8, 1]),
        ),
        y=alt.Y("mean_value:Q", title="mean gauss_gap over heads (Gaussian − empirical AP)"),
        color=look.color(),
        opacity=look.opacity(),
        tooltip=model_tooltip(
            alt.Tooltip("depth_bin:O", title="depth bin (tenths)"),
            alt.Tooltip("first_layer:Q", title="first layer"),
            alt.Tooltip("last_layer:Q", title="last layer"),
            alt.Tooltip("n_heads:Q", title="heads"),
            alt.Tooltip("mean_value:Q", title="mean gap", format="+.4f"),
        ),
    )
    zero = alt.Chart().mark_rule(color="#888", strokeDash=[3, 3]).encode(y=alt.datum(0))
    middle = alt.layer(
        zero, depth.mark_line(strokeWidth=1.8), depth.mark_point(filled=True, size=40)
    ).properties(
        width=330,
        height=330,
        title=alt.Title(
            "Gap by layer depth", subtitle="mean over the heads in each tenth of depth"
        ),
    )

    # 3. the model-level gap with its interval
    ylabels = model_sort(marts, [r["model_id"] for r in level])
    base = alt.Chart(table_of(level)).encode(
        y=alt.Y("model:N", sort=ylabels, title=None, axis=alt.Axis(labelLimit=260))
    )
    x = alt.X("gauss_gap:Q", title="model gauss_gap (ap_overall Gaussian − empirical)")
    pts = point_marks(
        base,
        size=70,
        x=x,
        color=look.color(),
        opacity=look.opacity(1, 0.15),
        tooltip=model_tooltip(
            alt.Tooltip("gauss_gap:Q", title="gauss_gap", format="+.4f"),
            alt.Tooltip("interval:N", title="interval"),
            alt.Tooltip("n_layers:Q", title="layers (resampled)"),
            alt.Tooltip("n_heads:Q", title="heads"),
        ),
    )
    right = alt.layer(
        alt.Chart().mark_rule(color="#888", strokeDash=[3, 3]).encode(x=alt.datum(0)),
        errorbar(base, x, color="#444", thickness=2, ticks=False),
        *pts,
    ).properties(
        width=260,
        height=alt.Step(24),
        title=alt.Title("Per model, with interval", subtitle="hollow = no interval"),
    )
    shown = (
        f"{len(buckets):,} of {n_all:,} buckets drawn (sample: see the caption)"
        if n_all > len(buckets)
        else f"{n_all:,} buckets"
    )
    chart = (
        alt.hconcat(left, middle, right, spacing=28)
        .resolve_scale(color="shared")
        .properties(
            title=alt.Title(
                "Gaussian vs empirical plasticity",
                subtitle=[
                    "Gaussian: closed form treating each bucket's queries as Gaussian; "
                    "empirical: the same key pairs scored with the real queries; "
                    "gap > 0 = the Gaussian shortcut overstates plasticity",
                    shown + " (plasticity_buckets_gap); depth means from depth_profile",
                ],
            )
        )
    )
    return Drawn(chart, ci.caption("Right panel, bars"))


register(
    FigureDef(
        "ap-gauss-vs-empirical",
        SECTION,
        "Gaussian vs empirical plasticity",
        "Per-bucket Gaussian against empirical plasticity with the identity line, the gap by "
        "layer depth (means over the heads of a depth bin, without an interval), and each "
        "model's gap with its interval.",
        ("plasticity_buckets_gap", "depth_profile", "model_summary", "model_metric_ci"),
        gauss_vs_empirical,
        order=8,
    ),
)
