"""Model-level intervals in the figures.

Every model-level value a figure draws comes with the interval ``model_metric_ci`` holds for it
(a layer-cluster bootstrap: each model's layers redrawn with replacement B times, the metric
recomputed per replicate, the middle ``level`` share of the replicates kept).  This module
attaches those intervals to a figure's records, writes the caption sentence that says what the
interval is (level, method, B, resampling unit, read from the mart), and draws the error bars.
A model without an interval (too few layers with a value) keeps its point, drawn hollow, and the
caption and tooltip say why.  With ``combined=True`` a model that has a document-group jackknife
gets the combined interval instead (layers and documents, ``ci_low_combined``), and the caption
and tooltip name which interval each point carries.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import altair as alt

from qkwh.reports.base import Marts

CI_MART = "model_metric_ci"
NO_INTERVAL = "datum.ci_low == null"


def pct(level: float) -> str:
    """0.95 -> '95 %'."""
    v = 100 * level
    return f"{v:.0f} %" if abs(v - round(v)) < 1e-9 else f"{v:g} %"


def fmt(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.4g}"


class Intervals:
    """The ``model_metric_ci`` rows of ``metrics`` for the selected models.

    :meth:`fields` gives the columns a record needs (ci_low, ci_high, interval text, note) and
    remembers the row, so :meth:`caption` describes exactly the intervals that were drawn.
    """

    def __init__(self, marts: Marts, metrics: Iterable[str], *, combined: bool = False) -> None:
        self.marts = marts
        self.combined = combined
        self.available = marts.has(CI_MART)
        wanted = sorted(set(metrics))
        rows = (
            marts.rows(CI_MART, "list_contains(?::VARCHAR[], metric)", [wanted])
            if self.available
            else []
        )
        self._by = {(r["model_id"], r["metric"]): r for r in rows}
        self._used: dict[tuple[str, str], dict[str, Any]] = {}

    def row(self, model_id: str, metric: str) -> dict[str, Any] | None:
        return self._by.get((model_id, metric))

    def fields(
        self, model_id: str, metric: str, transform: Callable[[float], float] | None = None
    ) -> dict[str, Any]:
        """``ci_low``, ``ci_high`` (through ``transform``, e.g. a unit scale or 1 − x; the bounds
        are re-ordered if it decreases), ``interval`` (text for tooltips) and ``n_layers``."""
        r = self.row(model_id, metric)
        if r is None:
            why = (
                "not in model_metric_ci"
                if self.available
                else "no model_metric_ci (run `qkwh build`)"
            )
            return {"ci_low": None, "ci_high": None, "interval": f"none: {why}", "n_layers": None}
        self._used[(model_id, metric)] = r
        lo, hi = r.get("ci_low"), r.get("ci_high")
        kind = "layers"
        if self.combined and r.get("ci_low_combined") is not None:
            lo, hi, kind = r["ci_low_combined"], r["ci_high_combined"], "layers+documents"
        if lo is None or hi is None:
            return {
                "ci_low": None,
                "ci_high": None,
                "interval": f"none: {r.get('note') or 'no interval'}",
                "n_layers": r.get("n_layers"),
            }
        if transform is not None:
            lo, hi = sorted((transform(lo), transform(hi)))
        return {
            "ci_low": lo,
            "ci_high": hi,
            "interval": f"[{fmt(lo)}, {fmt(hi)}] ({pct(r['level'])}"
            + (f", {kind})" if self.combined else ")"),
            "n_layers": r.get("n_layers"),
        }

    def caption(self, what: str = "Error bars") -> str:
        """What the drawn intervals are, and which models have none (and why)."""
        used = list(self._used.values())
        if not used:
            if not self.available:
                return f"{what}: none (the warehouse has no model_metric_ci; run `qkwh build`)."
            return f"{what}: none (model_metric_ci has no row for these values)."
        with_ci = [r for r in used if r.get("ci_low") is not None]
        parts = []
        if with_ci:
            levels = " / ".join(pct(v) for v in sorted({r["level"] for r in with_ci}))
            boots = " / ".join(f"{v:,}" for v in sorted({r["n_boot"] for r in with_ci}))
            methods = sorted({r.get("method") or "" for r in with_ci})
            kind = (
                "layer-cluster bootstrap percentile interval"
                if methods == ["layer_cluster_bootstrap_percentile"]
                else ", ".join(methods)
            )
            parts.append(
                f"{what}: {levels} {kind} of the model value (model_metric_ci): the "
                f"model's layers are redrawn with replacement, B = {boots} replicates, "
                "all heads of a drawn layer counting together."
            )
        else:
            parts.append(f"{what}: none drawn.")
        if self.combined:
            docs = sorted(
                {
                    self.marts.display(r["model_id"])
                    for r in with_ci
                    if r.get("ci_low_combined") is not None
                }
            )
            if docs:
                parts.append(
                    f"For {', '.join(docs)} the bar is the combined interval (layers+documents): "
                    "estimate ∓ z·sqrt(se² + se_documents²), adding the document-group "
                    "jackknife's standard error to the bootstrap's (docs/uncertainty.md)."
                )
            else:
                parts.append(
                    "No model has a document-group jackknife, so the bars count layer noise "
                    "only (`qkwh compute --documents` adds document noise)."
                )
        missing: dict[str, set[str]] = {}
        for r in used:
            if r.get("ci_low") is None:
                note = r.get("note") or "no interval"
                missing.setdefault(note, set()).add(self.marts.display(r["model_id"]))
        for note, models in sorted(missing.items()):
            who = ", ".join(sorted(models))
            parts.append(f"No interval (hollow mark) for {who}: {note}.")
        return " ".join(parts)


def along(like: alt.X | alt.Y, field: str) -> alt.X | alt.Y:
    """A channel on the same axis as ``like`` (same title, so layered axes keep one title)."""
    cls = alt.X if isinstance(like, alt.X) else alt.Y
    return cls(field, title=like.to_dict().get("title", alt.Undefined))


def errorbar(base: alt.Chart, like: alt.X | alt.Y, **mark: Any) -> alt.Chart:
    """Error bars from ``ci_low`` to ``ci_high`` on the axis of ``like`` (the value's channel)
    for the records that have an interval."""
    axis = "x" if isinstance(like, alt.X) else "y"
    enc = {axis: along(like, "ci_low:Q"), f"{axis}2": "ci_high:Q"}
    style = {"ticks": True, "thickness": 1.6, "size": 7, **mark}
    return base.transform_filter("datum.ci_low != null").mark_errorbar(**style).encode(**enc)


def point_marks(base: alt.Chart, size: int = 60, **encode: Any) -> list[alt.Chart]:
    """Filled points where an interval exists, hollow points (white fill) where it does not."""
    filled = (
        base.transform_filter("datum.ci_low != null")
        .mark_point(filled=True, size=size, opacity=1)
        .encode(**encode)
    )
    hollow = (
        base.transform_filter(NO_INTERVAL)
        .mark_point(filled=False, size=size, strokeWidth=2, fill="white", opacity=1)
        .encode(**encode)
    )
    return [filled, hollow]
