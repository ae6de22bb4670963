"""Attention-plasticity figures (seed 003/004, figures attention-plasticity/01–10; spec §2.3.8)."""

from __future__ import annotations

from typing import Any

import altair as alt

from qkwh.reports.base import (
    table_of,
    FigureDef,
    Marts,
    NoData,
    family_color,
    family_opacity,
    finite,
    token_axis,
    require,
)

SECTION = "Plasticity"

AP_TITLE = "attention plasticity AP (0–1)"
AP_MEANING = "AP → 1: the query's content decides which key wins; AP → 0: position decides"


def heatmap(marts: Marts, model_id: str) -> alt.LayerChart:
    rows = marts.rows("plasticity_heatmap_model", "model_id = ?", [model_id])
    rows = require([r for r in rows if r.get("n")], f"{model_id}: no plasticity heatmap cells")
    for r in rows:
        w = r["bin_width_tokens"]
        r["dx_end"] = r["dx_tokens"] + w
        r["dm_end"] = r["dm_tokens"] + w
        r["state"] = "masked (n < n_min)" if r["masked"] else "value"
    if all(r["masked"] for r in rows):
        raise NoData(f"{model_id}: every heatmap cell has fewer pairs than n_min")
    w = rows[0]["bin_width_tokens"]
    base = alt.Chart().encode(
        x=alt.X("dx_tokens:Q", title="inter-key distance |s1 − s2| (tokens)",
                axis=token_axis(), scale=alt.Scale(nice=False)),
        x2="dx_end:Q",
        y=alt.Y("dm_tokens:Q", title="query to key-midpoint distance (tokens)",
                axis=token_axis(), scale=alt.Scale(nice=False)),
        y2="dm_end:Q",
        tooltip=[alt.Tooltip("model_id:N", title="model"),
                 alt.Tooltip("dx_tokens:Q", title="inter-key distance from (tokens)"),
                 alt.Tooltip("dm_tokens:Q", title="key-to-query distance from (tokens)"),
                 alt.Tooltip("ap_mean:Q", title="AP (pooled)", format=".3f"),
                 alt.Tooltip("n:Q", title="pairs", format=","),
                 alt.Tooltip("n_heads:Q", title="heads"),
                 alt.Tooltip("state:N", title="cell")],
    )
    cells = base.transform_filter("!datum.masked").mark_rect().encode(
        color=alt.Color("ap_mean:Q", title="AP (pooled over heads)",
                        scale=alt.Scale(scheme="viridis", domain=[0, 1]),
                        legend=alt.Legend(gradientLength=220)))
    masked = base.transform_filter("datum.masked").mark_rect(color="#e6e6e6")
    return alt.layer(masked, cells, data=table_of(rows)).properties(
        width=420, height=380, title=alt.Title(
            f"{model_id}: plasticity by key spacing and distance to the query",
            subtitle=f"cell = Σ sum_pp / Σ n over heads and query buckets; bins of {w:,} tokens; "
                     f"grey = fewer than n_min pairs (masked)"))


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


def head_profiles(marts: Marts, model_id: str) -> alt.LayerChart:
    heads = [r for r in marts.rows("head_metrics", "model_id = ?", [model_id]) if r["has_plasticity"]]
    model = marts.rows("model_summary", "model_id = ? AND n_heads_plasticity > 0", [model_id])
    if not heads:
        raise NoData(f"{model_id}: no head plasticity profiles")
    ctx = heads[0].get("context_length")
    data = []
    for r in heads:
        for d in _decile_rows(r, ctx):
            data.append({**d, "model_id": model_id, "head_label": r["head_label"], "layer": r["layer"],
                         "q_head": r["q_head"], "k_head": r["k_head"], "series": "one head"})
    for r in model:
        for d in _decile_rows(r, ctx):
            data.append({**d, "model_id": model_id, "head_label": "model mean", "layer": None,
                         "q_head": None, "k_head": None,
                         "series": f"model mean ({r['n_heads_plasticity']} heads)"})
    xfield = "tokens:Q" if ctx else "rel:Q"
    xtitle = ("query position, decile centre (tokens)" if ctx
              else "query position, decile centre (share of context)")
    series = sorted({d["series"] for d in data}, key=lambda s: s != "one head")
    base = alt.Chart().encode(
        x=alt.X(xfield, title=xtitle, axis=token_axis() if ctx else alt.Axis(format="%"),
                scale=alt.Scale(domain=[0, ctx] if ctx else [0, 1], nice=False)),
        y=alt.Y("ap:Q", title=AP_TITLE, scale=alt.Scale(domain=[0, 1])),
        detail="head_label:N",
        color=alt.Color("series:N", title=None, sort=series,
                        scale=alt.Scale(domain=series, range=["#9e9e9e", "#d62728"][:len(series)])),
        tooltip=[alt.Tooltip("model_id:N", title="model"), alt.Tooltip("head_label:N", title="head"),
                 alt.Tooltip("layer:Q"), alt.Tooltip("q_head:Q", title="query head"),
                 alt.Tooltip("decile:O", title="decile"),
                 alt.Tooltip("ap:Q", title="AP", format=".3f")],
    )
    grey = base.transform_filter("datum.series == 'one head'").mark_line(strokeWidth=1, opacity=0.55)
    red = base.transform_filter("datum.series != 'one head'").mark_line(
        strokeWidth=3, point=alt.OverlayMarkDef(size=40, filled=True))
    return alt.layer(grey, red, data=table_of(data)).properties(
        width=480, height=300, title=alt.Title(
            f"{model_id}: plasticity profile of every head",
            subtitle=["head decile values (n-weighted over query buckets, spec §2.3.8); red = model "
                      "mean over heads", AP_MEANING]))


def component_weights(marts: Marts) -> alt.FacetChart:
    rows = require(finite(marts.rows("component_weights_model"), "component_weight"),
                   "component_weights_model is empty")
    color, sel = family_color(marts)
    for r in rows:
        r["family"] = marts.family_of(r["model_id"]) or "unknown"
    ds = sorted({r["d"] for r in rows})
    one_model = all(len({r["model_id"] for r in rows if r["d"] == d}) == 1 for d in ds)
    base = alt.Chart().encode(
        x=alt.X("component:Q", title="head-dimension index (rotate-half layout: i and i + d/2 share "
                                       "a RoPE frequency)", scale=alt.Scale(nice=False)),
        y=alt.Y("component_weight:Q", title="mean positional weight (share)",
                axis=alt.Axis(format="%")),
        detail="model_id:N",
    )
    tooltip = [alt.Tooltip("model_id:N", title="model"), alt.Tooltip("family:N"),
               alt.Tooltip("component:Q", title="dimension"),
               alt.Tooltip("rope_pair_index:Q", title="RoPE pair"),
               alt.Tooltip("component_weight:Q", title="mean weight", format=".2%"),
               alt.Tooltip("component_r2:Q", title="mean R²", format=".3f"),
               alt.Tooltip("n_heads:Q", title="heads")]
    if one_model:
        layer = base.mark_bar(binSpacing=1).encode(
            x=alt.X("component:Q", bin=alt.Bin(step=1), title="head-dimension index (rotate-half "
                    "layout: i and i + d/2 share a RoPE frequency)"),
            color=color, opacity=family_opacity(sel), tooltip=tooltip).add_params(sel)
        layers = [layer]
    else:
        line = base.mark_line(strokeWidth=1.6).encode(color=color, opacity=family_opacity(sel))
        pts = base.mark_point(filled=True, size=14).encode(
            color=color, opacity=family_opacity(sel), tooltip=tooltip).add_params(sel)
        layers = [line, pts]
    chart = alt.layer(*layers).properties(width=560, height=220).facet(
        row=alt.Row("d:O", title=None, sort=ds,
                    header=alt.Header(labelExpr="'d = ' + datum.value", labelAngle=0,
                                      labelAlign="left", labelOrient="top", labelFontWeight="bold")),
        data=table_of(rows))
    return chart.resolve_scale(x="independent").properties(title=alt.Title(
        "Positional component weights by head dimension",
        subtitle="w = max(R², 0) / Σ max(R², 0) of the query–position regression per dimension, "
                 "mean over heads (queries only)"))


def decile_profiles(marts: Marts) -> alt.LayerChart:
    rows = marts.rows("model_summary", "n_heads_plasticity > 0")
    data = []
    for r in rows:
        for d in _decile_rows(r, None):
            data.append({**d, "model_id": r["model_id"], "family": r["family"] or "unknown",
                         "n_heads": r["n_heads_plasticity"], "ctx": r.get("context_length")})
    require(data, "model_summary has no model deciles")
    color, sel = family_color(marts)
    base = alt.Chart(table_of(data)).encode(
        x=alt.X("rel:Q", title="query position, decile centre (share of the context window)",
                axis=alt.Axis(format="%", values=[0, 0.2, 0.4, 0.6, 0.8, 1.0]),
                scale=alt.Scale(domain=[0, 1], nice=False)),
        y=alt.Y("ap:Q", title=AP_TITLE, scale=alt.Scale(zero=False)),
        detail="model_id:N",
    )
    lines = base.mark_line(strokeWidth=2).encode(color=color, opacity=family_opacity(sel))
    pts = base.mark_point(filled=True, size=40).encode(
        color=color, opacity=family_opacity(sel),
        tooltip=[alt.Tooltip("model_id:N", title="model"), alt.Tooltip("family:N"),
                 alt.Tooltip("decile:O", title="decile"), alt.Tooltip("ap:Q", title="AP", format=".4f"),
                 alt.Tooltip("ctx:Q", title="context (tokens)", format=","),
                 alt.Tooltip("n_heads:Q", title="heads")],
    ).add_params(sel)
    return alt.layer(lines, pts).properties(width=480, height=300, title=alt.Title(
        "Plasticity decile profiles across models",
        subtitle=["model decile = mean over heads of the head's n-weighted decile value "
                  "(spec §2.3.8)", AP_MEANING]))


def drop_vs_benchmark(marts: Marts) -> alt.Chart:
    if not marts.has("benchmark_joins"):
        raise NoData("the warehouse has no benchmark_joins mart")
    obs = marts.rows("benchmark_joins", "metric = 'ap_drop' AND length_scope = 'overall'")
    obs = finite(obs, "score", "metric_value")
    if not obs:
        raise NoData("no ingested model has an overall benchmark score (benchmark_scores seed)")
    corr = marts.query(
        "SELECT benchmark, mode, n, pearson_r, boot_ci_low, boot_ci_high FROM benchmark_correlations "
        "WHERE metric = 'ap_drop' AND length_scope = 'overall'") if marts.has("benchmark_correlations") else []
    names = {"longbench_pro": "LongBench Pro", "ruler": "RULER"}
    subtitle = ["lines: least-squares fit of score on ap_drop; r over the ingested models with its "
                "95 % two-stage bootstrap interval (benchmark_correlations)"]
    for c in corr:
        r = "n/a" if c["pearson_r"] is None else f"{c['pearson_r']:+.2f}"
        if c["pearson_r"] is not None and c.get("boot_ci_low") is not None:
            r += f" [{c['boot_ci_low']:+.2f}, {c['boot_ci_high']:+.2f}]"
        mode = f" ({c['mode']})" if c.get("mode") else ""
        subtitle.append(f"{names.get(c['benchmark'], c['benchmark'])}{mode}: r = {r}, n = {c['n']}")
    for o in obs:
        mode = f" ({o['mode']})" if o.get("mode") else ""
        o["bench"] = names.get(o["benchmark"], o["benchmark"]) + mode
        o["family"] = o.get("family") or "unknown"
    color, sel = family_color(marts)
    base = alt.Chart().encode(
        x=alt.X("metric_value:Q", title="ap_drop = AP first 20 % − AP last 20 % (plasticity units)",
                scale=alt.Scale(zero=False)),
        y=alt.Y("score:Q", title="benchmark score (points)", scale=alt.Scale(zero=False)),
    )
    pts = base.mark_circle(size=90).encode(
        color=color, opacity=family_opacity(sel, on=0.9),
        tooltip=[alt.Tooltip("model_id:N", title="model"), alt.Tooltip("family:N"),
                 alt.Tooltip("bench:N", title="benchmark"), alt.Tooltip("score:Q", format=".2f"),
                 alt.Tooltip("metric_value:Q", title="ap_drop", format=".4f")]).add_params(sel)
    labels = base.mark_text(dx=7, align="left", fontSize=11).encode(text="model_id:N")
    fit = base.transform_regression("metric_value", "score").mark_line(color="#333", strokeDash=[5, 3])
    return alt.layer(fit, pts, labels).properties(width=380, height=300).facet(
        column=alt.Column("bench:N", title=None), data=table_of(obs),
    ).resolve_scale(y="independent", x="independent").properties(title=alt.Title(
        "Plasticity drop vs long-context benchmark score", subtitle=subtitle))


FIGURES: tuple[FigureDef, ...] = (
    FigureDef("ap-heatmap", SECTION, "Plasticity heatmap (inter-key × key-to-query distance)",
              "Pooled plasticity per (inter-key distance, key-to-query distance) cell; masked cells "
              "have fewer than n_min pairs (attention-plasticity/01–04).",
              ("plasticity_heatmap_model",), heatmap, per_model=True),
    FigureDef("ap-head-profiles", SECTION, "Per-head plasticity profiles with the model mean",
              "Every head's plasticity along the context (grey) and the model mean (red) "
              "(attention-plasticity/05–07).", ("head_metrics", "model_summary"), head_profiles,
              per_model=True),
    FigureDef("ap-component-weights", SECTION, "Component weights by head dimension",
              "Which head dimensions carry the query position signal (attention-plasticity/08).",
              ("component_weights_model",), component_weights),
    FigureDef("ap-decile-profiles", SECTION, "Decile profiles across models",
              "Model plasticity per decile of the context window (Tables 4/10).",
              ("model_summary",), decile_profiles),
    FigureDef("ap-drop-vs-benchmark", SECTION, "ap_drop vs benchmark score",
              "ap_drop against long-context benchmark scores with a linear fit and Pearson r "
              "(attention-plasticity/10).", ("benchmark_joins", "benchmark_correlations"),
              drop_vs_benchmark),
)
