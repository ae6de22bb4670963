"""Chart shapes used by more than one figure family (depth heatmaps, class shares with
intervals, Q/K collages)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import altair as alt

from qkwh.reports.base import (
    Marts,
    NoData,
    model_sort,
    model_tooltip,
    table_of,
)
from qkwh.reports.intervals import errorbar


@dataclass(frozen=True)
class Taxonomy:
    """The head classes and thresholds of the build (mart taxonomy_classes): class names in
    display order, their labels and colours, and the thresholds taxonomy_low / taxonomy_high."""

    classes: tuple[str, ...]
    labels: dict[str, str]
    colors: dict[str, str]
    low: float
    high: float

    def label(self, taxonomy: str | None) -> str | None:
        return self.labels.get(taxonomy or "", taxonomy)

    @property
    def thresholds(self) -> str:
        """'0.3 / 0.7'."""
        return f"{self.low:g} / {self.high:g}"


def taxonomy_classes(marts: Marts) -> Taxonomy:
    """The classes and thresholds the marts were built with (not constants of the report: a
    build with other ``--vars`` draws its own)."""
    if not marts.has("taxonomy_classes"):
        raise NoData("the warehouse has no taxonomy_classes mart: run `qkwh build`")
    rows = sorted(marts.rows("taxonomy_classes"), key=lambda r: r["class_order"])
    if not rows:
        raise NoData("taxonomy_classes is empty")
    return Taxonomy(
        tuple(r["taxonomy"] for r in rows),
        {r["taxonomy"]: r["label"] for r in rows},
        {r["taxonomy"]: r["color"] for r in rows},
        rows[0]["taxonomy_low"],
        rows[0]["taxonomy_high"],
    )


DEPTH_LABELS = [f"{k / 10:.1f}–{(k + 1) / 10:.1f}" for k in range(10)]


def depth_rows(marts: Marts, metric: str, scale: float = 1.0) -> list[dict[str, Any]]:
    """The depth_profile rows of ``metric`` for the selected models (mean_value times ``scale``,
    a display unit), tagged with the model's display name and family."""
    if not marts.has("depth_profile"):
        raise NoData("the warehouse has no depth_profile mart: run `qkwh build`")
    rows = [
        r
        for r in marts.rows("depth_profile", "metric = ?", [metric])
        if r.get("mean_value") is not None
    ]
    if not rows:
        raise NoData(f"no head has both a depth and {metric}")
    for r in rows:
        r["mean_value"] = r["mean_value"] * scale
    return marts.tag(rows)


def depth_heatmap(
    marts: Marts,
    metric: str,
    *,
    title: str,
    legend_title: str,
    scheme: str = "viridis",
    domain: Sequence[float] | None = None,
    diverging: bool = False,
    fmt: str = ".2f",
    scale: float = 1.0,
) -> alt.Chart:
    """Model × depth-bin heatmap of ``metric`` (a metric of the depth_profile mart): a cell is
    the mart's mean over the heads in that bin (times ``scale``, a display unit).

    Depth bin k holds layers with layer/(num_layers − 1) in [k/10, (k+1)/10)
    (docs/metrics/aggregation.md); a bin without heads (a model with fewer than 10 layers)
    is drawn grey, marked "no heads".
    """
    data = depth_rows(marts, metric, scale)
    order = model_sort(marts, {d["model_id"] for d in data})
    if diverging and not domain:  # symmetric around 0 so white means 0
        top = max(abs(d["mean_value"]) for d in data) or 1.0
        domain = [-top, top]
    dom = list(domain) if domain else alt.Undefined
    scale_ = (
        alt.Scale(scheme=scheme, domainMid=0, domain=dom)
        if diverging
        else alt.Scale(scheme=scheme, domain=dom)
    )
    x = alt.X("model:N", sort=order, title="model", axis=alt.Axis(labelAngle=-35, labelLimit=180))
    y = alt.Y(
        "depth_bin:O",
        title="relative depth layer / (layers − 1)",
        scale=alt.Scale(domain=list(range(10))),
        axis=alt.Axis(labelExpr=f"{DEPTH_LABELS!r}[datum.value]"),
    )
    base = alt.Chart(table_of(data)).encode(x=x, y=y)
    cells = base.mark_rect(stroke="white", strokeWidth=0.5).encode(
        color=alt.Color(
            "mean_value:Q", scale=scale_, title=legend_title, legend=alt.Legend(gradientLength=180)
        ),
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
            vals = [abs(d["mean_value"]) for d in data]
            lim = max(abs(v) for v in domain) if domain else max(vals)
            dark = f"abs(datum.mean_value) > {0.6 * lim!r}"
        else:
            lo, hi = (
                domain
                if domain
                else (min(d["mean_value"] for d in data), max(d["mean_value"] for d in data))
            )
            dark = f"datum.mean_value < {lo + 0.45 * (hi - lo)!r}"
        layers.append(
            base.mark_text(fontSize=11).encode(
                text=alt.Text("mean_value:Q", format=fmt),
                color=alt.condition(dark, alt.value("white"), alt.value("#111")),
            )
        )
    held = {(d["model_id"], d["depth_bin"]) for d in data}
    ids = [m for m in marts.models if any(d["model_id"] == m for d in data)]
    empty = [
        {"model": marts.display(m), "model_id": m, "depth_bin": k, "note": "no heads"}
        for m in ids
        for k in range(10)
        if (m, k) not in held
    ]
    if empty:  # a depth bin without heads (a model with fewer than 10 layers) says so
        blank = alt.Chart(table_of(empty)).encode(x=x, y=y)
        tip = [
            alt.Tooltip("model:N", title="model"),
            alt.Tooltip("model_id:N", title="model id"),
            alt.Tooltip("depth_bin:O", title="depth bin (tenths)"),
            alt.Tooltip("note:N", title="cell"),
        ]
        layers.append(
            blank.mark_rect(color="#f1f1f1", stroke="white", strokeWidth=0.5).encode(tooltip=tip)
        )
        layers.append(blank.mark_text(fontSize=9, color="#888").encode(text="note:N"))
    chart = alt.layer(*layers).properties(
        title=title,
        width=alt.Step(max(56, min(90, 600 // max(len(order), 1)))),
        height=alt.Step(26),
    )
    return chart


def class_shares(
    tax: Taxonomy,
    rows: list[dict[str, Any]],
    category: Any,
    *,
    width: Any,
    height: Any,
    vertical: bool = False,
    extra_tooltip: Sequence[Any] = (),
) -> alt.FacetChart:
    """Share of heads per taxonomy class as small multiples: one panel per class, a bar per
    model (``category``: the model / checkpoint channel) and its interval as an error bar.

    ``rows``: one per (model, class) with model_id, model, family, class (display name),
    fraction, n_heads, n_total and the interval fields of :class:`Intervals`.
    ``vertical`` puts the models on x and the share on y."""
    labels = [tax.labels[t] for t in tax.classes]
    share = dict(
        field="fraction",
        type="quantitative",
        title="share of heads",
        axis=alt.Axis(format="%", values=[0, 0.5, 1]),
        scale=alt.Scale(domain=[0, 1]),
    )
    base = alt.Chart().encode(**({"x": category} if vertical else {"y": category}))
    value = alt.Y(**share) if vertical else alt.X(**share)
    bars = base.mark_bar(
        **({"width": {"band": 0.7}} if vertical else {"height": {"band": 0.7}})
    ).encode(
        **{"y" if vertical else "x": value},
        color=alt.Color(
            "class:N",
            scale=alt.Scale(domain=labels, range=[tax.colors[t] for t in tax.classes]),
            sort=labels,
            title="head class",
            legend=None,
        ),
        tooltip=model_tooltip(
            *extra_tooltip,
            alt.Tooltip("class:N", title="class"),
            alt.Tooltip("n_heads:Q", title="heads"),
            alt.Tooltip("n_total:Q", title="of heads"),
            alt.Tooltip("fraction:Q", title="share", format=".1%"),
            alt.Tooltip("interval:N", title="interval"),
        ),
    )
    whisk = errorbar(base, value, color="#222", thickness=1.3)
    return (
        alt.layer(bars, whisk)
        .properties(width=width, height=height)
        .facet(
            column=alt.Column(
                "class:N", title=None, sort=labels, header=alt.Header(labelFontWeight="bold")
            ),
            data=table_of(rows),
            spacing=10,
        )
    )


def qk_collage(
    records: list[dict[str, Any]],
    *,
    x: str,
    y: str,
    x_title: str,
    y_title: str,
    context_length: int | None,
    title: str,
    subtitle: str | list[str] = "",
    columns: int = 2,
    panel: int = 260,
    panel_field: str = "panel",
    panel_sort: list[str] | None = None,
    size: int = 12,
    axis_titles: bool = True,
    panel_title: str = "head",
    constants: dict[str, str] | None = None,
) -> alt.FacetChart:
    """Q/K scatter panels: queries in blues and keys in oranges, both shaded by position
    (light = early, dark = late), one panel per ``panel_field`` value, independent axes."""
    if not records:
        raise NoData("no rows to project")
    top = context_length or max((r["position"] for r in records), default=1) or 1
    # one colour scale for both kinds: keys on the negative side (oranges), queries on the
    # positive side (blues), so a single legend reads "light = early, dark = late" for each.
    scale = alt.Scale(
        domain=[-top, -1e-9, 0, top],
        range=["#8c2d04", "#fdbe85", "#c6dbef", "#08306b"],
        interpolate="rgb",
    )
    constants = dict(constants or {})
    tooltip = [alt.Tooltip(f"{k}:N", title=k.replace("_", " ")) for k in constants] + [
        alt.Tooltip(f"{panel_field}:N", title=panel_title),
        alt.Tooltip("kind:N", title="Q/K"),
        alt.Tooltip("position:Q", title="position (tokens)"),
        alt.Tooltip(f"{x}:Q", title=x_title, format=".3g"),
        alt.Tooltip(f"{y}:Q", title=y_title, format=".3g"),
    ]
    points = (
        alt.Chart()
        .transform_calculate(
            shade="datum.kind == 'Q' ? datum.position : -datum.position",
            **{k: json.dumps(str(v)) for k, v in constants.items()},
        )
        .mark_circle(size=size, opacity=0.7)
        .encode(
            x=alt.X(
                f"{x}:Q",
                title=x_title if axis_titles else None,
                scale=alt.Scale(zero=False, nice=True),
                axis=alt.Axis(tickCount=6, labelOverlap=True),
            ),
            y=alt.Y(
                f"{y}:Q",
                title=y_title if axis_titles else None,
                scale=alt.Scale(zero=False, nice=True),
                axis=alt.Axis(tickCount=6, labelOverlap=True),
            ),
            color=alt.Color(
                "shade:Q",
                scale=scale,
                title=["token position", "keys: oranges", "queries: blues"],
                legend=alt.Legend(
                    gradientLength=220,
                    labelExpr="format(abs(datum.value), ',')",
                    values=[-top, -top // 2, 0, top // 2, top],
                ),
            ),
            tooltip=tooltip,
        )
        .properties(width=panel, height=panel)
    )
    chart = (
        points.facet(
            facet=alt.Facet(
                f"{panel_field}:N",
                title=None,
                sort=panel_sort or "ascending",
                header=alt.Header(labelFontSize=13, labelFontWeight="bold"),
            ),
            columns=columns,
            data=table_of(records),
        )
        .resolve_scale(x="independent", y="independent")
        .resolve_axis(x="independent", y="independent")
    )
    return chart.properties(title=alt.Title(title, subtitle=subtitle) if subtitle else title)
