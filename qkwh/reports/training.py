"""Training-dynamics figures over checkpoints (qk-pca/07–09, qk-rotation/09–10,
attention-plasticity/09; spec §4 Table 5).  Left out when no checkpoint is ingested."""

from __future__ import annotations

import os
from typing import Any

import altair as alt

from qkwh.reports.base import TAXONOMY_COLORS, TAXONOMY_LABELS, FigureDef, Marts, NoData, table_of

SECTION = "Training dynamics"

NO_CHECKPOINTS = ("no checkpoints ingested (training_trajectory is empty: ingest models with a "
                  "checkpoint phase, e.g. the smollm3-3b-* branches)")

PHASE_COLORS = ["#4c78a8", "#72b7b2", "#f58518", "#e45756", "#54a24b", "#b279a2"]


def _trajectory(marts: Marts) -> list[dict[str, Any]]:
    rows = marts.rows("training_trajectory", order="family, trajectory_rank, model_id")
    if not rows:
        raise NoData(NO_CHECKPOINTS)
    _label(rows)
    return rows


def _label(rows: list[dict[str, Any]]) -> None:
    """Short checkpoint labels: the model id without the prefix its family's ids share."""
    by_family: dict[str, list[str]] = {}
    for r in rows:
        by_family.setdefault(r.get("family") or "", []).append(r["model_id"])
    cut = {}
    for fam, ids in by_family.items():
        pre = os.path.commonprefix(ids) if len(ids) > 1 else ""
        cut[fam] = pre[: pre.rfind("-") + 1] if "-" in pre else ""
    for r in rows:
        fam = r.get("family") or ""
        label = r["model_id"][len(cut[fam]):] or r["model_id"]
        r["checkpoint"] = label if len(by_family) == 1 else f"{fam} {label}"
        r["phase"] = r.get("checkpoint_phase") or "unknown"


def _x(rows: list[dict[str, Any]]) -> alt.X:
    return alt.X("checkpoint:N", sort=[r["checkpoint"] for r in rows], title="checkpoint (training order)",
                 axis=alt.Axis(labelAngle=-40, labelLimit=220))


def _width(rows: list[dict[str, Any]], per: int = 30, least: int = 240) -> int:
    return max(least, per * len(rows))


def _phase_color(rows: list[dict[str, Any]]) -> alt.Color:
    phases = []
    for r in rows:
        if r["phase"] not in phases:
            phases.append(r["phase"])
    return alt.Color("phase:N", title="training phase", sort=phases,
                     scale=alt.Scale(domain=phases, range=(PHASE_COLORS * 3)[: len(phases)]))


def _tip(*extra: Any) -> list[Any]:
    return [alt.Tooltip("model_id:N", title="model"), alt.Tooltip("phase:N", title="phase"),
            alt.Tooltip("checkpoint_step:Q", title="step", format=","), *extra]


def rotation_trajectory(marts: Marts) -> alt.FacetChart:
    rows = _trajectory(marts)
    spec = (("abs_r_k_a", "|r_k_a| (Pearson r)", 1.0), ("separation_strength", "separation_strength (share)", 1.0),
            ("bias_strength", "bias_strength × 10³ (score/token)", 1e3),
            ("plane_var_fraction", "plane_var_fraction (share of variance)", 1.0))
    data = []
    for r in rows:
        for col, label, k in spec:
            q = [r.get(f"{col}_q25"), r.get(f"{col}_q50"), r.get(f"{col}_q75")]
            if q[1] is None:
                continue
            data.append({**{c: r[c] for c in ("model_id", "checkpoint", "phase", "checkpoint_step")},
                         "quantity": label, "q25": q[0] * k if q[0] is not None else None,
                         "q50": q[1] * k, "q75": q[2] * k if q[2] is not None else None})
    if not data:
        raise NoData("training_trajectory has no rotation quartiles")
    base = alt.Chart().encode(x=_x(rows))
    bars = base.mark_bar(width={"band": 0.7}).encode(
        y=alt.Y("q50:Q", title="median over heads (IQR whiskers)"), color=_phase_color(rows),
        tooltip=_tip(alt.Tooltip("q25:Q", title="25th pct", format=".4g"),
                     alt.Tooltip("q50:Q", title="median", format=".4g"),
                     alt.Tooltip("q75:Q", title="75th pct", format=".4g")))
    iqr = base.mark_rule(color="#222", strokeWidth=1.5).encode(y="q25:Q", y2="q75:Q")
    return alt.layer(bars, iqr).properties(width=_width(rows), height=190).facet(
        facet=alt.Facet("quantity:N", title=None, sort=[s[1] for s in spec]), columns=2,
        data=table_of(data),
    ).resolve_scale(y="independent").properties(title=alt.Title(
        "Rotation geometry across training checkpoints",
        subtitle="median and interquartile range over heads (qk-rotation/09)"))


def bias_decomposition(marts: Marts) -> alt.FacetChart:
    rows = marts.rows("bias_decomposition", "is_checkpoint", order="family, trajectory_rank, model_id")
    if not rows:
        raise NoData(NO_CHECKPOINTS)
    _label(rows)
    spec = (("mu_q_a", "mu_q_a (raw projection units)", 1.0),
            ("alpha_k", "alpha_k × 10³ (units per token)", 1e3),
            ("bias_strength", "bias_strength × 10³ (score per token)", 1e3))
    data = []
    for r in rows:
        for col, label, k in spec:
            if r.get(col) is not None:
                rel = r.get(f"rel_change_{col}")
                data.append({**{c: r[c] for c in ("model_id", "checkpoint", "phase", "checkpoint_step")},
                             "quantity": label, "value": r[col] * k, "rel": rel})
    base = alt.Chart().encode(x=_x(rows), y=alt.Y("value:Q", title="mean over heads",
                                                   scale=alt.Scale(zero=False)))
    line = base.mark_line(color="#888", strokeWidth=1.5)
    pts = base.mark_point(filled=True, size=80, opacity=1).encode(
        color=_phase_color(rows),
        tooltip=_tip(alt.Tooltip("value:Q", title="value", format=".4g"),
                     alt.Tooltip("rel:Q", title="change vs previous", format="+.1%")))
    return alt.layer(line, pts).properties(width=_width(rows), height=220).facet(
        column=alt.Column("quantity:N", title=None, sort=[s[1] for s in spec],
                          header=alt.Header(labelLimit=0)),
        data=table_of(data),
    ).resolve_scale(y="independent").properties(title=alt.Title(
        "Bias decomposition across checkpoints: bias_strength = mu_q_a · alpha_k",
        subtitle="means over heads: mu_q_a = mean query projection on the drift axis a, alpha_k = "
                 "key drift slope (qk-rotation/10)"))


def plasticity_trajectory(marts: Marts) -> alt.Chart:
    rows = _trajectory(marts)
    spec = (("ap_first_20pct", "first 20 % of context"), ("ap_last_20pct", "last 20 % of context"),
            ("ap_drop", "ap_drop (first − last)"))
    data = [{**{c: r[c] for c in ("model_id", "checkpoint", "phase", "checkpoint_step")},
             "quantity": label, "value": r[col]}
            for r in rows for col, label in spec if r.get(col) is not None]
    if not data:
        raise NoData("training_trajectory has no plasticity values")
    labels = [s[1] for s in spec]
    base = alt.Chart(table_of(data)).encode(
        x=_x(rows), y=alt.Y("value:Q", title="attention plasticity AP (0–1)"),
        color=alt.Color("quantity:N", sort=labels, title=None,
                        scale=alt.Scale(domain=labels, range=["#2ca02c", "#d62728", "#555"])),
    )
    return alt.layer(
        base.mark_line(strokeWidth=2),
        base.mark_point(filled=True, size=60).encode(
            tooltip=_tip(alt.Tooltip("quantity:N"), alt.Tooltip("value:Q", format=".4f"))),
    ).properties(width=_width(rows, 40, 360), height=280, title=alt.Title(
        "Plasticity across checkpoints: early vs late context",
        subtitle="ap_first_20pct, ap_last_20pct and ap_drop per checkpoint (attention-plasticity/09)"))


def pca_trajectory(marts: Marts) -> alt.FacetChart:
    rows = _trajectory(marts)
    spec = (("r_q0", "r_q0 (Pearson r)"), ("r_k0", "r_k0 (Pearson r)"),
            ("ev0", "PC0 explained variance (share)"))
    data = []
    for r in rows:
        for col, label in spec:
            m, s = r.get(f"{col}_mean"), r.get(f"{col}_sd")
            if m is None:
                continue
            data.append({**{c: r[c] for c in ("model_id", "checkpoint", "phase", "checkpoint_step")},
                         "quantity": label, "mean": m,
                         "lo": m - s if s is not None else m, "hi": m + s if s is not None else m})
    if not data:
        raise NoData("training_trajectory has no PCA statistics")
    base = alt.Chart().encode(x=_x(rows))
    pts = base.mark_point(filled=True, size=70).encode(
        y=alt.Y("mean:Q", title="mean ± sd over heads", scale=alt.Scale(zero=False)),
        color=_phase_color(rows),
        tooltip=_tip(alt.Tooltip("mean:Q", format=".3f"), alt.Tooltip("lo:Q", title="mean − sd", format=".3f"),
                     alt.Tooltip("hi:Q", title="mean + sd", format=".3f")))
    err = base.mark_rule(strokeWidth=1.5, color="#555").encode(y="lo:Q", y2="hi:Q")
    return alt.layer(err, pts).properties(width=_width(rows), height=220).facet(
        column=alt.Column("quantity:N", title=None, sort=[s[1] for s in spec]),
        data=table_of(data),
    ).resolve_scale(y="independent").properties(title=alt.Title(
        "PCA position signal across checkpoints", subtitle="qk-pca/07 and /09"))


def taxonomy_evolution(marts: Marts) -> alt.Chart:
    rows = _trajectory(marts)
    classes = list(TAXONOMY_LABELS)
    data = []
    for r in rows:
        for k, t in enumerate(classes):
            v = r.get(f"frac_{t}")
            if v is not None:
                data.append({**{c: r[c] for c in ("model_id", "checkpoint", "phase", "checkpoint_step")},
                             "class": TAXONOMY_LABELS[t], "k": k, "fraction": v})
    if not data:
        raise NoData("training_trajectory has no taxonomy fractions")
    labels = [TAXONOMY_LABELS[t] for t in classes]
    return alt.Chart(table_of(data)).mark_bar().encode(
        x=_x(rows),
        y=alt.Y("fraction:Q", title="share of heads (%)", axis=alt.Axis(format="%", values=[0, 0.2, 0.4, 0.6, 0.8, 1]),
                scale=alt.Scale(domain=[0, 1])),
        color=alt.Color("class:N", sort=labels, title="head class",
                        scale=alt.Scale(domain=labels, range=[TAXONOMY_COLORS[t] for t in classes])),
        order=alt.Order("k:Q"),
        tooltip=_tip(alt.Tooltip("class:N"), alt.Tooltip("fraction:Q", format=".1%")),
    ).properties(width=_width(rows, 40, 360), height=280, title=alt.Title(
        "Head taxonomy across checkpoints", subtitle="share of heads per class (qk-pca/08)"))


FIGURES: tuple[FigureDef, ...] = (
    FigureDef("train-bias-decomposition", SECTION, "Bias decomposition across checkpoints",
              "mu_q_a, alpha_k and bias_strength per checkpoint (qk-rotation/10).",
              ("bias_decomposition",), bias_decomposition),
    FigureDef("train-rotation", SECTION, "Rotation geometry across checkpoints",
              "|r_k_a|, separation, bias and plane variance, median + IQR (qk-rotation/09).",
              ("training_trajectory",), rotation_trajectory),
    FigureDef("train-plasticity", SECTION, "Plasticity first/last 20 % and ap_drop across checkpoints",
              "Early- and late-context plasticity and their difference (attention-plasticity/09).",
              ("training_trajectory",), plasticity_trajectory),
    FigureDef("train-pca", SECTION, "PCA position signal across checkpoints",
              "r_q0, r_k0 and PC0 explained variance, mean ± sd (qk-pca/07, /09).",
              ("training_trajectory",), pca_trajectory),
    FigureDef("train-taxonomy", SECTION, "Taxonomy evolution across checkpoints",
              "Share of heads per taxonomy class per checkpoint (qk-pca/08).",
              ("training_trajectory",), taxonomy_evolution),
)
