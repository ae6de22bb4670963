"""Forest plots: a row per model, its value as a point with its interval as a bar.  The forest of
models by ap_drop (``ap-forest``) and the panels every other forest draws through
(:func:`forest_panel`, :func:`band_panels`: the RoPE band forests)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import altair as alt

from qkwh.reports.base import (
    Drawn,
    FigureDef,
    Marts,
    finite,
    model_look,
    model_sort,
    model_tooltip,
    require,
    table_of,
)
from qkwh.reports.catalogue import register
from qkwh.reports.intervals import Intervals, errorbar, point_marks
from qkwh.reports.plasticity import SECTION

FOREST_METRICS = (
    ("ap_drop", "ap_drop = AP first 20 % − last 20 %"),
    ("ap_overall", "ap_overall (mean AP over the context)"),
)


def forest_panel(
    keep: Any,
    rows: list[str],
    x: alt.X,
    tip: list[alt.Tooltip],
    color: Any,
    *,
    labels: bool,
    size: int,
    thickness: float,
    width: int,
    step: int,
    title: alt.Title,
    offset: alt.YOffset | None = None,
    under: Callable[[alt.Chart], alt.Chart] | None = None,
    points_first: bool = False,
) -> alt.LayerChart:
    """One panel of a forest plot over the figure's data (records with ``model``, the value on
    ``x`` and the interval fields of :class:`~qkwh.reports.intervals.Intervals`): the records
    ``keep`` selects (a Vega-Lite predicate), a row per model in the order ``rows`` (display
    labels; the row labels drawn when ``labels``, on a figure's first panel), the value as a
    point (hollow without an interval) with its interval as a bar, ``under`` drawn beneath, and
    rows split by ``offset`` when a model has several points.  ``points_first`` draws the
    points under the bars."""
    y = alt.Y("model:N", sort=rows, title=None, axis=alt.Axis(labelLimit=320) if labels else None)
    base = alt.Chart().transform_filter(keep).encode(y=y)
    if offset is not None:
        base = base.encode(yOffset=offset)
    layers = [under(base)] if under is not None else []
    bars = errorbar(base, x, color="#333", thickness=thickness, ticks=False)
    points = point_marks(base, size=size, x=x, color=color, tooltip=tip)
    layers += [*points, bars] if points_first else [bars, *points]
    return alt.layer(*layers).properties(width=width, height=alt.Step(step), title=title)


def group_panels(
    marts: Marts,
    data: list[dict[str, Any]],
    field: str,
    groups: Sequence[tuple[str, alt.Title]],
    x: alt.X,
    tip: list[alt.Tooltip],
    color: Any,
    *,
    size: int,
    width: int,
    step: int,
    thickness: float = 1.6,
    offset: alt.YOffset | None = None,
    under: Callable[[alt.Chart], alt.Chart] | None = None,
) -> list[alt.LayerChart]:
    """A forest panel (:func:`forest_panel`) per group of ``groups`` (value of ``field``, panel
    title) present in ``data``, the models in the report's order, labelled on the first."""
    rows = model_sort(marts, {d["model_id"] for d in data})
    present = [(g, title) for g, title in groups if any(d[field] == g for d in data)]
    return [
        forest_panel(
            getattr(alt.datum, field) == g,
            rows,
            x,
            tip,
            color,
            labels=i == 0,
            size=size,
            thickness=thickness,
            width=width,
            step=step,
            title=title,
            offset=offset,
            under=under,
        )
        for i, (g, title) in enumerate(present)
    ]


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
    panels = []
    for i, (metric, title) in enumerate(FOREST_METRICS):
        x = alt.X("value:Q", title=title, scale=alt.Scale(zero=False, nice=True))
        tip = model_tooltip(
            alt.Tooltip("metric:N", title="metric"),
            alt.Tooltip("value:Q", title="value", format=".4f"),
            alt.Tooltip("interval:N", title="interval"),
            alt.Tooltip("n_layers:Q", title="layers (resampled)"),
            alt.Tooltip("n_heads:Q", title="heads"),
        )
        panels.append(
            forest_panel(
                alt.datum.metric == title,
                ylabels,
                x,
                tip,
                look.color(legend=False),
                labels=i == 0,
                size=60,
                thickness=1.8,
                width=300,
                step=24,
                title=alt.Title(metric, fontSize=13, anchor="middle"),
                points_first=True,
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


register(
    FigureDef(
        "ap-forest",
        SECTION,
        "Forest plot: models by ap_drop",
        "Each model's ap_drop and ap_overall with their intervals, sorted by ap_drop.",
        ("model_summary", "model_metric_ci"),
        forest,
        order=5,
    ),
)
