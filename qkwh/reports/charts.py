"""Chart shapes used by more than one figure family (depth heatmaps, class shares with
intervals, Q/K collages)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import altair as alt

from qkwh.reports.base import (
    TAXONOMY_COLORS,
    TAXONOMY_LABELS,
    Marts,
    NoData,
    model_sort,
    model_tooltip,
    table_of,
)
from qkwh.reports.intervals import errorbar

DEPTH_LABELS = [f"{k / 10:.1f}–{(k + 1) / 10:.1f}" for k in range(10)]


def depth_heatmap(marts: Marts, rows: list[dict[str, Any]], value: str, *, title: str,
                  legend_title: str, scheme: str = "viridis", domain: Sequence[float] | None = None,
                  diverging: bool = False, fmt: str = ".2f") -> alt.Chart:
    """Model × depth-bin heatmap; a cell is the mean of ``value`` over the heads in that bin.

    ``rows`` are head rows with model_id, layer, depth_bin and ``value``.  Depth bin k holds
    layers with layer/(num_layers − 1) in [k/10, (k+1)/10) (docs/metrics/aggregation.md); empty bins stay blank.
    """
    rows = [r for r in rows if r.get(value) is not None and r.get("depth_bin") is not None]
    if not rows:
        raise NoData(f"no head has both a depth and {value}")
    data = marts.tag([{"model_id": r["model_id"], "layer": r["layer"], "depth_bin": int(r["depth_bin"]),
                       "value": r[value]} for r in rows])
    order = model_sort(marts, {d["model_id"] for d in data})
    if diverging and not domain:  # symmetric around 0 so white means 0
        top = max(abs(d["value"]) for d in data) or 1.0
        domain = [-top, top]
    dom = list(domain) if domain else alt.Undefined
    scale = (alt.Scale(scheme=scheme, domainMid=0, domain=dom) if diverging
             else alt.Scale(scheme=scheme, domain=dom))
    x = alt.X("model:N", sort=order, title="model",
              axis=alt.Axis(labelAngle=-35, labelLimit=180))
    y = alt.Y("depth_bin:O", title="relative depth layer / (layers − 1)",
              scale=alt.Scale(domain=list(range(10))),
              axis=alt.Axis(labelExpr=f"{DEPTH_LABELS!r}[datum.value]"))
    base = alt.Chart(table_of(data)).transform_aggregate(
        mean_value="mean(value)", n_heads="count()", first_layer="min(layer)",
        last_layer="max(layer)", groupby=["model", "model_id", "depth_bin"],
    ).encode(x=x, y=y)
    cells = base.mark_rect(stroke="white", strokeWidth=0.5).encode(
        color=alt.Color("mean_value:Q", scale=scale, title=legend_title,
                        legend=alt.Legend(gradientLength=180)),
        tooltip=[
            alt.Tooltip("model:N", title="model"),
            alt.Tooltip("model_id:N", title="model id"),
            alt.Tooltip("depth_bin:O", title="depth bin (tenths)"),
            alt.Tooltip("first_layer:Q", title="first layer"),
            alt.Tooltip("last_layer:Q", title="last layer"),
            alt.Tooltip("n_heads:Q", title="heads"),
            alt.Tooltip("mean_value:Q", title=legend_title, format=fmt),
        ],
    )
    layers: list[Any] = [cells]
    n_cells = len({(d["model"], d["depth_bin"]) for d in data})
    if n_cells <= 160:
        # white text on the dark end of the scale, black elsewhere
        if diverging:
            vals = [abs(d["value"]) for d in data]
            lim = max(abs(v) for v in domain) if domain else max(vals)
            dark = f"abs(datum.mean_value) > {0.6 * lim!r}"
        else:
            lo, hi = (domain if domain else (min(d["value"] for d in data), max(d["value"] for d in data)))
            dark = f"datum.mean_value < {lo + 0.45 * (hi - lo)!r}"
        layers.append(base.mark_text(fontSize=11).encode(
            text=alt.Text("mean_value:Q", format=fmt),
            color=alt.condition(dark, alt.value("white"), alt.value("#111")),
        ))
    chart = alt.layer(*layers).properties(
        title=title, width=alt.Step(max(56, min(90, 600 // max(len(order), 1)))), height=alt.Step(26))
    return chart


def class_shares(rows: list[dict[str, Any]], category: Any, *, width: Any, height: Any,
                 vertical: bool = False, extra_tooltip: Sequence[Any] = ()) -> alt.FacetChart:
    """Share of heads per taxonomy class as small multiples: one panel per class, a bar per
    model (``category``: the model / checkpoint channel) and its interval as an error bar.

    ``rows``: one per (model, class) with model_id, model, family, class (display name),
    fraction, n_heads, n_total and the interval fields of :class:`Intervals`.
    ``vertical`` puts the models on x and the share on y."""
    classes = list(TAXONOMY_LABELS)
    labels = [TAXONOMY_LABELS[t] for t in classes]
    share = dict(field="fraction", type="quantitative", title="share of heads",
                 axis=alt.Axis(format="%", values=[0, 0.5, 1]), scale=alt.Scale(domain=[0, 1]))
    base = alt.Chart().encode(**({"x": category} if vertical else {"y": category}))
    value = alt.Y(**share) if vertical else alt.X(**share)
    bars = base.mark_bar(**({"width": {"band": 0.7}} if vertical else {"height": {"band": 0.7}})).encode(
        **{"y" if vertical else "x": value},
        color=alt.Color("class:N", scale=alt.Scale(domain=labels,
                                                   range=[TAXONOMY_COLORS[t] for t in classes]),
                        sort=labels, title="head class", legend=None),
        tooltip=model_tooltip(*extra_tooltip, alt.Tooltip("class:N", title="class"),
                              alt.Tooltip("n_heads:Q", title="heads"),
                              alt.Tooltip("n_total:Q", title="of heads"),
                              alt.Tooltip("fraction:Q", title="share", format=".1%"),
                              alt.Tooltip("interval:N", title="interval")))
    whisk = errorbar(base, value, color="#222", thickness=1.3)
    return alt.layer(bars, whisk).properties(width=width, height=height).facet(
        column=alt.Column("class:N", title=None, sort=labels, header=alt.Header(labelFontWeight="bold")),
        data=table_of(rows), spacing=10)


def qk_collage(records: list[dict[str, Any]], *, x: str, y: str, x_title: str, y_title: str,
               context_length: int | None, title: str, subtitle: str | list[str] = "",
               columns: int = 2, panel: int = 260, panel_field: str = "panel",
               panel_sort: list[str] | None = None, size: int = 12,
               axis_titles: bool = True, panel_title: str = "head",
               constants: dict[str, str] | None = None) -> alt.FacetChart:
    """Q/K scatter panels: queries in blues and keys in oranges, both shaded by position
    (light = early, dark = late), one panel per ``panel_field`` value, independent axes."""
    if not records:
        raise NoData("no rows to project")
    top = context_length or max((r["position"] for r in records), default=1) or 1
    # one colour scale for both kinds: keys on the negative side (oranges), queries on the
    # positive side (blues), so a single legend reads "light = early, dark = late" for each.
    scale = alt.Scale(domain=[-top, -1e-9, 0, top],
                      range=["#8c2d04", "#fdbe85", "#c6dbef", "#08306b"], interpolate="rgb")
    constants = dict(constants or {})
    tooltip = [alt.Tooltip(f"{k}:N", title=k.replace("_", " ")) for k in constants] + [
        alt.Tooltip(f"{panel_field}:N", title=panel_title),
        alt.Tooltip("kind:N", title="Q/K"),
        alt.Tooltip("position:Q", title="position (tokens)"),
        alt.Tooltip(f"{x}:Q", title=x_title, format=".3g"),
        alt.Tooltip(f"{y}:Q", title=y_title, format=".3g"),
    ]
    points = alt.Chart().transform_calculate(
        shade="datum.kind == 'Q' ? datum.position : -datum.position",
        **{k: json.dumps(str(v)) for k, v in constants.items()},
    ).mark_circle(size=size, opacity=0.7).encode(
        x=alt.X(f"{x}:Q", title=x_title if axis_titles else None, scale=alt.Scale(zero=False, nice=True),
                axis=alt.Axis(tickCount=6, labelOverlap=True)),
        y=alt.Y(f"{y}:Q", title=y_title if axis_titles else None, scale=alt.Scale(zero=False, nice=True),
                axis=alt.Axis(tickCount=6, labelOverlap=True)),
        color=alt.Color(
            "shade:Q", scale=scale,
            title=["token position", "keys: oranges", "queries: blues"],
            legend=alt.Legend(gradientLength=220, labelExpr="format(abs(datum.value), ',')",
                              values=[-top, -top // 2, 0, top // 2, top]),
        ),
        tooltip=tooltip,
    ).properties(width=panel, height=panel)
    chart = points.facet(
        facet=alt.Facet(f"{panel_field}:N", title=None, sort=panel_sort or "ascending",
                        header=alt.Header(labelFontSize=13, labelFontWeight="bold")),
        columns=columns,
        data=table_of(records),
    ).resolve_scale(x="independent", y="independent").resolve_axis(x="independent", y="independent")
    return chart.properties(title=alt.Title(title, subtitle=subtitle) if subtitle else title)
