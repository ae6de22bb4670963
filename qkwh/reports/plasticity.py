"""Attention-plasticity figures (figures attention-plasticity/01–10; docs/metrics/plasticity.md),
the forest plot of models by ap_drop and the Gaussian-vs-empirical comparison."""

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
    model_sort,
    model_tooltip,
    pick,
    require,
    table_of,
    token_axis,
)
from qkwh.reports.catalogue import register, section
from qkwh.reports.charts import depth_rows
from qkwh.reports.intervals import Intervals, along, errorbar, pct, point_marks

SECTION = section("Plasticity", order=30)

AP_TITLE = "attention plasticity AP (0–1)"
AP_MEANING = "AP → 1: the query's content decides which key wins; AP → 0: position decides"
NO_EMPIRICAL = (
    "no empirical plasticity in the warehouse: run `qkwh compute -p "
    "plasticity.empirical=true` and `qkwh build`"
)
SCATTER_CAP = 3000  # buckets drawn in the Gaussian-vs-empirical scatter (Marts.sample)


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


# ------------------------------------------------------------------------------------------
# forest plot: models by ap_drop, with intervals
# ------------------------------------------------------------------------------------------

FOREST_METRICS = (
    ("ap_drop", "ap_drop = AP first 20 % − last 20 %"),
    ("ap_overall", "ap_overall (mean AP over the context)"),
)


def forest_order(marts: Marts) -> list[str]:
    """Model ids with an ap_drop, largest ap_drop first (model_summary's values), ties by id."""
    rows = finite(marts.rows("model_summary"), "ap_drop")
    return [r["model_id"] for r in sorted(rows, key=lambda r: (-r["ap_drop"], r["model_id"]))]


def forest(marts: Marts) -> Drawn:
    order = require(forest_order(marts), "no model has an ap_drop (no plasticity results)")
    summary = {r["model_id"]: r for r in marts.rows("model_summary")}
    ci = Intervals(marts, [m for m, _ in FOREST_METRICS], combined=True)
    data = []
    for m in order:
        for metric, title in FOREST_METRICS:
            v = summary[m].get(metric)
            if v is None:
                continue
            data.append(
                {
                    "model_id": m,
                    "metric": title,
                    "value": v,
                    "n_heads": summary[m].get("n_heads_plasticity"),
                    **ci.fields(m, metric),
                }
            )
    data = marts.tag(data)
    look = model_look(marts, order)
    ylabels = [marts.display(m) for m in order]
    y = alt.Y("model:N", sort=ylabels, title=None, axis=alt.Axis(labelLimit=320))
    panels = []
    for i, (metric, title) in enumerate(FOREST_METRICS):
        base = (
            alt.Chart()
            .transform_filter(alt.datum.metric == title)
            .encode(y=y if i == 0 else alt.Y("model:N", sort=ylabels, title=None, axis=None))
        )
        x = alt.X("value:Q", title=title, scale=alt.Scale(zero=False, nice=True))
        tip = model_tooltip(
            alt.Tooltip("metric:N", title="metric"),
            alt.Tooltip("value:Q", title="value", format=".4f"),
            alt.Tooltip("interval:N", title="interval"),
            alt.Tooltip("n_layers:Q", title="layers (resampled)"),
            alt.Tooltip("n_heads:Q", title="heads"),
        )
        bars = errorbar(base, x, color="#333", thickness=1.8, ticks=False)
        pts = point_marks(base, size=60, x=x, color=look.color(legend=False), tooltip=tip)
        layer = alt.layer(*pts, bars)
        panels.append(
            layer.properties(
                width=300,
                height=alt.Step(24),
                title=alt.Title(metric, fontSize=13, anchor="middle"),
            )
        )
    chart = (
        alt.hconcat(*panels, data=table_of(data), spacing=18)
        .resolve_scale(y="shared")
        .properties(
            title=alt.Title(
                "Models by plasticity drop (ap_drop), with intervals",
                subtitle=[
                    "sorted by ap_drop, largest first; point = model value, bar = its "
                    "interval; hollow = no interval",
                    "models whose bars overlap may not differ: see model_comparisons / "
                    "`qkwh compare` for the interval of each difference",
                ],
            )
        )
    )
    return Drawn(chart, ci.caption("Bars"))


# ------------------------------------------------------------------------------------------
# one model captured on two datasets: the paired differences with their intervals
# ------------------------------------------------------------------------------------------

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


# ------------------------------------------------------------------------------------------
# ap_drop vs benchmark score
# ------------------------------------------------------------------------------------------

BENCH_NAMES = {"longbench_pro": "LongBench Pro", "ruler": "RULER"}


def _bench(row: dict[str, Any]) -> str:
    mode = f" ({row['mode']})" if row.get("mode") else ""
    return BENCH_NAMES.get(row["benchmark"], row["benchmark"]) + mode


def _r_text(c: dict[str, Any]) -> str:
    """'r = +0.76 (n = 3, p = 0.45); 95 % Fisher-z [..]; 95 % two-stage bootstrap [..]'."""
    if c.get("pearson_r") is None:
        return f"r = n/a (n = {c['n']}{'; ' + c['note'] if c.get('note') else ''})"
    lvl = pct(c["level"]) + " " if c.get("level") is not None else ""
    p = "" if c.get("p_value") is None else f", p = {c['p_value']:.2g}"
    fz = (
        "Fisher-z interval n/a (needs n > 3)"
        if c.get("fisher_ci_low") is None
        else f"{lvl}Fisher-z [{c['fisher_ci_low']:+.2f}, {c['fisher_ci_high']:+.2f}]"
    )
    bs = (
        "bootstrap interval n/a"
        if c.get("boot_ci_low") is None
        else f"{lvl}two-stage bootstrap [{c['boot_ci_low']:+.2f}, {c['boot_ci_high']:+.2f}]"
    )
    return f"r = {c['pearson_r']:+.2f} (n = {c['n']}{p}); {fz}; {bs}"


def drop_vs_benchmark(marts: Marts) -> Drawn:
    if not marts.has("benchmark_joins"):
        raise NoData("the warehouse has no benchmark_joins mart")
    obs = marts.rows("benchmark_joins", "metric = 'ap_drop' AND length_scope = 'overall'")
    obs = finite(obs, "score", "metric_value")
    if not obs:
        raise NoData("no ingested model has an overall benchmark score (benchmark_scores seed)")
    corr = (
        marts.rows("benchmark_correlations", "metric = 'ap_drop' AND length_scope = 'overall'")
        if marts.has("benchmark_correlations")
        else []
    )
    ci = Intervals(marts, ["ap_drop"])
    for o in obs:
        o["bench"] = _bench(o)
        o.update(ci.fields(o["model_id"], "ap_drop"))
    obs = marts.tag(obs)
    fits = (
        marts.rows("benchmark_fits", "metric = 'ap_drop' AND length_scope = 'overall'")
        if marts.has("benchmark_fits")
        else []
    )
    line = [
        {"bench": _bench(f), "fit_x": x, "fit_score": y}
        for f in fits
        if f.get("slope") is not None
        for x, y in ((f["x_min"], f["y_at_x_min"]), (f["x_max"], f["y_at_x_max"]))
    ]
    lines = [f"{_bench(c)}: {_r_text(c)}" for c in corr]
    subtitle = [
        "horizontal bars: interval of each model's ap_drop; dashed line: least-squares fit "
        "of score on ap_drop (benchmark_fits)"
    ] + lines
    look = model_look(marts, {o["model_id"] for o in obs})
    y = alt.Y("score:Q", title="benchmark score (points)", scale=alt.Scale(zero=False))
    base = alt.Chart().transform_filter("isValid(datum.model_id)").encode(y=y)
    x = alt.X(
        "metric_value:Q",
        title="ap_drop = AP first 20 % − AP last 20 % (plasticity units)",
        scale=alt.Scale(zero=False),
    )
    tip = model_tooltip(
        alt.Tooltip("bench:N", title="benchmark"),
        alt.Tooltip("score:Q", format=".2f"),
        alt.Tooltip("metric_value:Q", title="ap_drop", format=".4f"),
        alt.Tooltip("interval:N", title="ap_drop interval"),
    )
    bars = errorbar(base, x, color="#777", thickness=1.4)
    pts = point_marks(
        base,
        size=90,
        x=x,
        color=look.color(),
        shape=look.shape(),
        opacity=look.opacity(),
        tooltip=tip,
    )
    labels = base.mark_text(dx=8, dy=-8, align="left", fontSize=11).encode(x=x, text="model:N")
    fit = (
        alt.Chart()
        .transform_filter("isValid(datum.fit_x)")
        .mark_line(color="#333", strokeDash=[5, 3])
        .encode(x=along(x, "fit_x:Q"), y=along(y, "fit_score:Q"))
    )
    chart = (
        alt.layer(fit, bars, pts[0].add_params(look.selection), pts[1], labels)
        .properties(width=400, height=320)
        .facet(column=alt.Column("bench:N", title=None), data=table_of(obs + line))
        .resolve_scale(y="independent", x="independent")
        .properties(
            title=alt.Title("Plasticity drop vs long-context benchmark score", subtitle=subtitle)
        )
    )
    cap = ci.caption("Horizontal bars")
    if corr:
        cap += (
            " Pearson r over every ingested model with a score (benchmark_correlations), with "
            "its Fisher-z interval (models as independent points measured without error) and "
            "its two-stage bootstrap interval (models redrawn, and for each one of its own "
            "bootstrap values of ap_drop): " + "; ".join(lines) + "."
        )
    return Drawn(chart, cap)


# ------------------------------------------------------------------------------------------
# Gaussian vs empirical plasticity
# ------------------------------------------------------------------------------------------


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


FIGURES = register(
    FigureDef(
        "ap-heatmap",
        SECTION,
        "Plasticity heatmap (inter-key × key-to-query distance)",
        "Pooled plasticity per (inter-key distance, key-to-query distance) cell; masked cells "
        "have fewer than n_min pairs.",
        ("plasticity_heatmap_model",),
        heatmap,
        per_model=True,
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
    ),
    FigureDef(
        "ap-decile-profiles",
        SECTION,
        "Decile profiles across models",
        "Model plasticity per decile of the context window, one colour per model, with intervals.",
        ("model_summary", "model_metric_ci"),
        decile_profiles,
    ),
    FigureDef(
        "ap-forest",
        SECTION,
        "Forest plot: models by ap_drop",
        "Each model's ap_drop and ap_overall with their intervals, sorted by ap_drop.",
        ("model_summary", "model_metric_ci"),
        forest,
    ),
    FigureDef(
        "ap-dataset-comparisons",
        SECTION,
        "One model on two datasets",
        "For each model captured on two datasets, the difference of every compared metric "
        "(plasticity, gaps, rotation, PCA) between the captures, head by head, with its interval.",
        ("dataset_comparisons",),
        dataset_comparisons,
    ),
    FigureDef(
        "ap-drop-vs-benchmark",
        SECTION,
        "ap_drop vs benchmark score",
        "ap_drop against long-context benchmark scores with a linear fit and Pearson r.",
        ("benchmark_joins", "benchmark_fits", "benchmark_correlations", "model_metric_ci"),
        drop_vs_benchmark,
    ),
    FigureDef(
        "ap-gauss-vs-empirical",
        SECTION,
        "Gaussian vs empirical plasticity",
        "Per-bucket Gaussian against empirical plasticity with the identity line, the gap by "
        "layer depth (means over the heads of a depth bin, without an interval), and each "
        "model's gap with its interval.",
        ("plasticity_buckets_gap", "depth_profile", "model_summary", "model_metric_ci"),
        gauss_vs_empirical,
    ),
)
