"""Training-dynamics figures over checkpoints (qk-pca/07–09, qk-rotation/09–10,
attention-plasticity/09).  Left out when no checkpoint is ingested."""

from __future__ import annotations

import os
from typing import Any

import altair as alt

from qkwh.reports.base import Drawn, FigureDef, Marts, NoData, table_of
from qkwh.reports.catalogue import register, section
from qkwh.reports.charts import class_shares, taxonomy_classes
from qkwh.reports.intervals import Intervals, along, errorbar, point_marks

SECTION = section("Training dynamics", order=50)

NO_CHECKPOINTS = (
    "no checkpoints ingested (training_trajectory is empty: ingest models with a "
    "checkpoint phase, e.g. the smollm3-3b-* branches)"
)

PHASE_COLORS = ["#4c78a8", "#72b7b2", "#f58518", "#e45756", "#54a24b", "#b279a2"]
KEYS = ("model_id", "model", "family", "checkpoint", "phase", "checkpoint_step")


def _trajectory(marts: Marts) -> list[dict[str, Any]]:
    rows = marts.rows("training_trajectory", order="family, trajectory_rank, model_id")
    if not rows:
        raise NoData(NO_CHECKPOINTS)
    _label(marts, rows)
    return rows


def _label(marts: Marts, rows: list[dict[str, Any]]) -> None:
    """Checkpoint labels: the model's label when it has one, else the model id without the
    prefix its family's ids share."""
    by_family: dict[str, list[str]] = {}
    for r in rows:
        by_family.setdefault(r.get("family") or "", []).append(r["model_id"])
    cut = {}
    for fam, ids in by_family.items():
        pre = os.path.commonprefix(ids) if len(ids) > 1 else ""  # noqa: RUF071 (cut at a '-' below)
        cut[fam] = pre[: pre.rfind("-") + 1] if "-" in pre else ""
    for r in rows:
        fam = r.get("family") or ""
        info = marts.info(r["model_id"])
        if info.label != r["model_id"]:
            label = info.display
        else:
            label = r["model_id"][len(cut[fam]) :] or r["model_id"]
            label = label if len(by_family) == 1 else f"{fam} {label}"
        r["checkpoint"] = label
        r["model"] = info.display
        r["family"] = info.family
        r["phase"] = r.get("checkpoint_phase") or "unknown"


def _x(rows: list[dict[str, Any]]) -> alt.X:
    return alt.X(
        "checkpoint:N",
        sort=[r["checkpoint"] for r in rows],
        title="checkpoint (training order)",
        axis=alt.Axis(labelAngle=-40, labelLimit=220),
    )


def _width(rows: list[dict[str, Any]], per: int = 30, least: int = 240) -> int:
    return max(least, per * len(rows))


def _phase_color(rows: list[dict[str, Any]], *, legend: bool = True) -> alt.Color:
    phases = []
    for r in rows:
        if r["phase"] not in phases:
            phases.append(r["phase"])
    return alt.Color(
        "phase:N",
        title="training phase",
        sort=phases,
        scale=alt.Scale(domain=phases, range=(PHASE_COLORS * 3)[: len(phases)]),
        legend=alt.Legend() if legend else None,
    )


def _tip(*extra: Any) -> list[Any]:
    return [
        alt.Tooltip("model:N", title="model"),
        alt.Tooltip("model_id:N", title="model id"),
        alt.Tooltip("phase:N", title="phase"),
        alt.Tooltip("checkpoint_step:Q", title="step", format=","),
        *extra,
    ]


def rotation_trajectory(marts: Marts) -> Drawn:
    rows = _trajectory(marts)
    spec = (
        ("abs_r_k_a", "|r_k_a| (Pearson r)", 1.0),
        ("separation_strength", "separation_strength (share)", 1.0),
        ("bias_strength", "bias_strength × 10³ (score/token)", 1e3),
        ("plane_var_fraction", "plane_var_fraction (share of variance)", 1.0),
    )
    ci = Intervals(marts, [c for c, _, _ in spec])
    data = []
    for r in rows:
        for col, label, k in spec:
            q = [r.get(f"{col}_q25"), r.get(f"{col}_q50"), r.get(f"{col}_q75")]
            if q[1] is None:
                continue
            mean = r.get(col)
            data.append(
                {
                    **{c: r[c] for c in KEYS},
                    "quantity": label,
                    "q25": q[0] * k if q[0] is not None else None,
                    "q50": q[1] * k,
                    "q75": q[2] * k if q[2] is not None else None,
                    "mean": mean * k if mean is not None else None,
                    **ci.fields(r["model_id"], col, lambda v, k=k: v * k),  # type: ignore[misc]
                }
            )
    if not data:
        raise NoData("training_trajectory has no rotation quartiles")
    base = alt.Chart().encode(x=_x(rows))
    y = alt.Y("q50:Q", title="value over heads")
    bars = base.mark_bar(width={"band": 0.7}, opacity=0.75).encode(
        y=y,
        color=_phase_color(rows),
        tooltip=_tip(
            alt.Tooltip("q25:Q", title="25th pct", format=".4g"),
            alt.Tooltip("q50:Q", title="median", format=".4g"),
            alt.Tooltip("q75:Q", title="75th pct", format=".4g"),
            alt.Tooltip("mean:Q", title="mean", format=".4g"),
            alt.Tooltip("interval:N", title="interval of the mean"),
        ),
    )
    iqr = base.mark_rule(color="#666", strokeWidth=1.2, strokeDash=[2, 2]).encode(
        y=along(y, "q25:Q"), y2="q75:Q"
    )
    mean = point_marks(
        base,
        size=34,
        y=along(y, "mean:Q"),
        color=alt.value("#111"),
        tooltip=_tip(
            alt.Tooltip("mean:Q", title="mean", format=".4g"),
            alt.Tooltip("interval:N", title="interval of the mean"),
        ),
    )
    chart = (
        alt.layer(bars, iqr, errorbar(base, y, color="#111", thickness=1.6), *mean)
        .properties(width=_width(rows), height=190)
        .facet(
            facet=alt.Facet("quantity:N", title=None, sort=[s[1] for s in spec]),
            columns=2,
            data=table_of(data),
        )
        .resolve_scale(y="independent")
        .properties(
            title=alt.Title(
                "Rotation geometry across training checkpoints",
                subtitle="bar: median over heads, dotted line: interquartile range (spread of heads); black: "
                "mean over heads with its interval",
            )
        )
    )
    return Drawn(
        chart,
        "The interquartile range is the spread of the heads, not an interval. "
        + ci.caption("Black bars (on the mean)"),
    )


def bias_decomposition(marts: Marts) -> Drawn:
    rows = marts.rows(
        "bias_decomposition", "is_checkpoint", order="family, trajectory_rank, model_id"
    )
    if not rows:
        raise NoData(NO_CHECKPOINTS)
    _label(marts, rows)
    spec = (
        ("mu_q_a", "mu_q_a (raw projection units)", 1.0),
        ("alpha_k", "alpha_k × 10³ (units per token)", 1e3),
        ("bias_strength", "bias_strength × 10³ (score per token)", 1e3),
    )
    ci = Intervals(marts, [c for c, _, _ in spec])
    data = []
    for r in rows:
        for col, label, k in spec:
            if r.get(col) is not None:
                rel = r.get(f"rel_change_{col}")
                data.append(
                    {
                        **{c: r[c] for c in KEYS},
                        "quantity": label,
                        "value": r[col] * k,
                        "rel": rel,
                        **ci.fields(r["model_id"], col, lambda v, k=k: v * k),  # type: ignore[misc]
                    }
                )
    base = alt.Chart().encode(x=_x(rows))
    y = alt.Y("value:Q", title="mean over heads", scale=alt.Scale(zero=False))
    line = base.mark_line(color="#888", strokeWidth=1.5).encode(y=y)
    pts = point_marks(
        base,
        size=80,
        y=y,
        color=_phase_color(rows),
        tooltip=_tip(
            alt.Tooltip("value:Q", title="value", format=".4g"),
            alt.Tooltip("interval:N", title="interval"),
            alt.Tooltip("rel:Q", title="change vs previous", format="+.1%"),
        ),
    )
    chart = (
        alt.layer(line, errorbar(base, y, color="#333"), *pts)
        .properties(width=_width(rows), height=220)
        .facet(
            column=alt.Column(
                "quantity:N", title=None, sort=[s[1] for s in spec], header=alt.Header(labelLimit=0)
            ),
            data=table_of(data),
        )
        .resolve_scale(y="independent")
        .properties(
            title=alt.Title(
                "Bias decomposition across checkpoints: bias_strength = mu_q_a · alpha_k",
                subtitle="means over heads with their intervals: mu_q_a = mean query projection on the drift "
                "axis a, alpha_k = key drift slope",
            )
        )
    )
    return Drawn(chart, ci.caption())


def plasticity_trajectory(marts: Marts) -> Drawn:
    rows = _trajectory(marts)
    spec = (
        ("ap_first_20pct", "first 20 % of context"),
        ("ap_last_20pct", "last 20 % of context"),
        ("ap_drop", "ap_drop (first − last)"),
    )
    ci = Intervals(marts, [c for c, _ in spec])
    data = [
        {
            **{c: r[c] for c in KEYS},
            "quantity": label,
            "value": r[col],
            **ci.fields(r["model_id"], col),
        }
        for r in rows
        for col, label in spec
        if r.get(col) is not None
    ]
    if not data:
        raise NoData("training_trajectory has no plasticity values")
    labels = [s[1] for s in spec]
    color = alt.Color(
        "quantity:N",
        sort=labels,
        title=None,
        scale=alt.Scale(domain=labels, range=["#2ca02c", "#d62728", "#555"]),
    )
    base = alt.Chart(table_of(data)).encode(x=_x(rows))
    y = alt.Y("value:Q", title="attention plasticity AP (0–1)")
    line = base.mark_line(strokeWidth=2).encode(y=y, color=color)
    pts = point_marks(
        base,
        size=60,
        y=y,
        color=color,
        tooltip=_tip(
            alt.Tooltip("quantity:N"),
            alt.Tooltip("value:Q", format=".4f"),
            alt.Tooltip("interval:N", title="interval"),
        ),
    )
    chart = alt.layer(line, errorbar(base, y).encode(color=color), *pts).properties(
        width=_width(rows, 40, 360),
        height=280,
        title=alt.Title(
            "Plasticity across checkpoints: early vs late context",
            subtitle="ap_first_20pct, ap_last_20pct and ap_drop per checkpoint with their intervals "
            "",
        ),
    )
    return Drawn(chart, ci.caption())


def pca_trajectory(marts: Marts) -> Drawn:
    rows = _trajectory(marts)
    spec = (
        ("r_q0", "r_q_0", "r_q0 (Pearson r)"),
        ("r_k0", "r_k_0", "r_k0 (Pearson r)"),
        ("ev0", "ev_0", "PC0 explained variance (share)"),
    )
    ci = Intervals(marts, [m for _, m, _ in spec])
    data = []
    for r in rows:
        for col, metric, label in spec:
            m, s = r.get(f"{col}_mean"), r.get(f"{col}_sd")
            if m is None:
                continue
            data.append(
                {
                    **{c: r[c] for c in KEYS},
                    "quantity": label,
                    "mean": m,
                    "lo": m - s if s is not None else m,
                    "hi": m + s if s is not None else m,
                    **ci.fields(r["model_id"], metric),
                }
            )
    if not data:
        raise NoData("training_trajectory has no PCA statistics")
    base = alt.Chart().encode(x=_x(rows))
    y = alt.Y(
        "mean:Q",
        title="mean over heads: interval (thick), ± sd (thin)",
        scale=alt.Scale(zero=False),
    )
    sd = base.mark_rule(strokeWidth=1, color="#aaa").encode(y=along(y, "lo:Q"), y2="hi:Q")
    pts = point_marks(
        base,
        size=50,
        y=y,
        color=_phase_color(rows),
        tooltip=_tip(
            alt.Tooltip("mean:Q", format=".3f"),
            alt.Tooltip("interval:N", title="interval"),
            alt.Tooltip("lo:Q", title="mean − sd", format=".3f"),
            alt.Tooltip("hi:Q", title="mean + sd", format=".3f"),
        ),
    )
    chart = (
        alt.layer(sd, *pts, errorbar(base, y, color="#222", thickness=3, ticks=False))
        .properties(width=_width(rows), height=220)
        .facet(
            column=alt.Column("quantity:N", title=None, sort=[s[2] for s in spec]),
            data=table_of(data),
        )
        .resolve_scale(y="independent")
        .properties(
            title=alt.Title(
                "PCA position signal across checkpoints",
                subtitle="mean over heads; thick bar: its interval, thin grey line: ± 1 sd over heads (the "
                "spread of heads)",
            )
        )
    )
    return Drawn(
        chart,
        "Thin grey lines: ± 1 sd over heads (spread, not an interval). " + ci.caption("Thick bars"),
    )


def taxonomy_evolution(marts: Marts) -> Drawn:
    rows = _trajectory(marts)
    tax = taxonomy_classes(marts)
    ci = Intervals(marts, [f"frac_{t}" for t in tax.classes])
    data = []
    for r in rows:
        for t, label in tax.labels.items():
            v = r.get(f"frac_{t}")
            if v is not None:
                data.append(
                    {
                        **{c: r[c] for c in KEYS},
                        "class": label,
                        "fraction": v,
                        "n_total": None,
                        "n_heads": None,
                        **ci.fields(r["model_id"], f"frac_{t}"),
                    }
                )
    if not data:
        raise NoData("training_trajectory has no taxonomy fractions")
    chart = class_shares(
        tax,
        data,
        _x(rows),
        width=max(150, 22 * len(rows)),
        height=200,
        vertical=True,
        extra_tooltip=[
            alt.Tooltip("phase:N", title="phase"),
            alt.Tooltip("checkpoint_step:Q", title="step", format=","),
        ],
    )
    return Drawn(
        chart.properties(
            title=alt.Title(
                "Head taxonomy across checkpoints",
                subtitle="share of heads per class, one panel per class, black bars = interval of each share "
                "",
            )
        ),
        ci.caption("Black bars"),
    )


FIGURES = register(
    FigureDef(
        "train-bias-decomposition",
        SECTION,
        "Bias decomposition across checkpoints",
        "mu_q_a, alpha_k and bias_strength per checkpoint with intervals.",
        ("bias_decomposition", "model_metric_ci"),
        bias_decomposition,
    ),
    FigureDef(
        "train-rotation",
        SECTION,
        "Rotation geometry across checkpoints",
        "|r_k_a|, separation, bias and plane variance: median + IQR over heads, and the mean "
        "with its interval.",
        ("training_trajectory", "model_metric_ci"),
        rotation_trajectory,
    ),
    FigureDef(
        "train-plasticity",
        SECTION,
        "Plasticity first/last 20 % and ap_drop across checkpoints",
        "Early- and late-context plasticity and their difference, with intervals.",
        ("training_trajectory", "model_metric_ci"),
        plasticity_trajectory,
    ),
    FigureDef(
        "train-pca",
        SECTION,
        "PCA position signal across checkpoints",
        "r_q0, r_k0 and PC0 explained variance: mean with its interval and ± sd over heads.",
        ("training_trajectory", "model_metric_ci"),
        pca_trajectory,
    ),
    FigureDef(
        "train-taxonomy",
        SECTION,
        "Taxonomy evolution across checkpoints",
        "Share of heads per taxonomy class per checkpoint, with intervals.",
        ("training_trajectory", "taxonomy_classes", "model_metric_ci"),
        taxonomy_evolution,
    ),
)
