"""ap_drop against long-context benchmark scores, with a linear fit and Pearson r
(``ap-drop-vs-benchmark``)."""

from __future__ import annotations

from typing import Any

import altair as alt

from qkwh.reports.base import (
    Drawn,
    FigureDef,
    Marts,
    NoData,
    finite,
    model_look,
    model_tooltip,
    table_of,
)
from qkwh.reports.catalogue import register
from qkwh.reports.intervals import Intervals, along, errorbar, pct, point_marks
from qkwh.reports.plasticity import SECTION

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


register(
    FigureDef(
        "ap-drop-vs-benchmark",
        SECTION,
        "ap_drop vs benchmark score",
        "ap_drop against long-context benchmark scores with a linear fit and Pearson r.",
        ("benchmark_joins", "benchmark_fits", "benchmark_correlations", "model_metric_ci"),
        drop_vs_benchmark,
        order=7,
    ),
)
