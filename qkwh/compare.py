"""Tell two models apart: ``qkwh compare A B``.

Reads the ``model_comparisons`` and ``model_metric_ci`` marts (built by ``qkwh build``) through a
read-only connection and returns, per metric, both models' values with their layer-cluster
bootstrap intervals, the difference A - B with its interval, and a verdict.  When A and B are two
captures of one model on different datasets (a pair of ``dataset_comparisons``), the paired form
is used: the difference over the heads both hold, with paired layer draws.  Where a model has a
document-group jackknife the intervals are the combined ones (``interval`` says which).
Nothing is computed here: the numbers are the marts', only oriented so that A comes first.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from dataclasses import asdict, dataclass

from qkwh import store
from qkwh.errors import InputError, NotFoundError, QkwhError, did_you_mean

MARTS = ("model_comparisons", "model_metric_ci")


@dataclass(frozen=True)
class MetricComparison:
    """One metric of one model pair, oriented as A - B."""

    metric: str
    model_a: str
    model_b: str
    label_a: str | None
    label_b: str | None
    estimate_a: float | None
    ci_low_a: float | None
    ci_high_a: float | None
    estimate_b: float | None
    ci_low_b: float | None
    ci_high_b: float | None
    difference: float | None
    ci_low: float | None
    ci_high: float | None
    distinguishable: bool | None
    interval: str | None  # 'layers' | 'layers+documents' (None without an interval)
    paired: bool  # from dataset_comparisons: two captures of one model, compared head by head
    level: float | None
    n_boot: int | None
    seed: int | None
    note: str | None

    @property
    def verdict(self) -> str:
        """'A > B', 'A < B', 'cannot tell' (interval holds 0) or 'no interval'."""
        if self.distinguishable is None:
            return "no interval"
        if not self.distinguishable:
            return "cannot tell"
        return "A > B" if (self.difference or 0.0) > 0 else "A < B"

    def as_dict(self) -> dict:
        return {**asdict(self), "verdict": self.verdict}


def compare(
    warehouse: str | os.PathLike[str] | None,
    model_a: str,
    model_b: str,
    metrics: list[str] | None = None,
) -> list[MetricComparison]:
    """The comparisons of ``model_a`` against ``model_b`` (one per metric, A - B).

    Raises NotFoundError (exit 4) for an unknown model or metric, naming the known ones,
    InputError when A = B, and QkwhError asking for ``qkwh build`` when the marts are missing.
    """
    if model_a == model_b:
        raise InputError(f"compare two different models (got {model_a!r} twice)")
    con = store.connect(warehouse, read_only=True)
    try:
        present = set(store.table_names(con))
        missing = [m for m in MARTS if m not in present]
        if missing:
            raise QkwhError(
                f"the warehouse {store.resolve_warehouse(warehouse)} has no "
                f"{' / '.join(missing)}: run `qkwh build` first"
            )
        known = [r[0] for r in con.execute("SELECT model_id FROM models ORDER BY 1").fetchall()]
        unknown = [m for m in (model_a, model_b) if m not in known]
        if unknown:
            listed = ", ".join(known) if known else "none (run `qkwh ingest`)"
            named = ", ".join(f"{u!r}{did_you_mean(u, known)}" for u in unknown)
            raise NotFoundError(f"unknown model {named}; known models: {listed}")
        if metrics:
            available = [
                r[0]
                for r in con.execute(
                    "SELECT DISTINCT metric FROM model_comparisons ORDER BY 1"
                ).fetchall()
            ]
            bad = [m for m in metrics if m not in available]
            if bad:
                raise NotFoundError(
                    f"no comparison for metric {', '.join(map(repr, bad))}; compared metrics: "
                    f"{', '.join(available) or 'none'} (the metrics the analyses declare as compared)"
                )
        paired = "dataset_comparisons" in present and bool(
            con.execute(
                "SELECT count(*) FROM dataset_comparisons WHERE (model_a = $1 AND model_b = $2) "
                "OR (model_a = $2 AND model_b = $1)",
                [model_a, model_b],
            ).fetchall()[0][0]
        )
        cur = con.execute(
            store.load_sql("compare_pair").replace(
                "{comparisons}", "dataset_comparisons" if paired else "model_comparisons"
            ),
            [model_a, model_b, metrics or None],
        )
        names = [d[0] for d in cur.description]
        rows = [
            MetricComparison(**{k: _clean(v) for k, v in zip(names, r)}) for r in cur.fetchall()
        ]
    finally:
        con.close()
    return rows


def ablation_effects(
    warehouse: str | os.PathLike[str] | None, model_a: str, model_b: str
) -> list[dict]:
    """The ablation effects of A and B side by side, one row per (metric, rank_order, method,
    k, length) where both models have a run (read from the mart ``ablation_effects``; empty
    when either model has none or the mart is missing)."""
    from qkwh.ablate.effects import both_models

    con = store.connect(warehouse, read_only=True)
    try:
        return [{k: _clean(v) for k, v in r.items()} for r in both_models(con, model_a, model_b)]
    finally:
        con.close()


def _clean(v):
    return None if isinstance(v, float) and not math.isfinite(v) else v


# ------------------------------------------------------------------------------------------
# output
# ------------------------------------------------------------------------------------------

FIELDS = (
    "metric",
    "model_a",
    "model_b",
    "estimate_a",
    "ci_low_a",
    "ci_high_a",
    "estimate_b",
    "ci_low_b",
    "ci_high_b",
    "difference",
    "ci_low",
    "ci_high",
    "distinguishable",
    "verdict",
    "level",
    "n_boot",
    "seed",
    "note",
    "interval",
    "paired",
)


def to_csv(rows: list[MetricComparison]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=FIELDS, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: ("" if v is None else v) for k, v in r.as_dict().items()})
    return buf.getvalue()


def to_json(rows: list[MetricComparison]) -> str:
    return json.dumps([{k: r.as_dict()[k] for k in FIELDS} for r in rows], indent=2)


def fmt(v: float | None) -> str:
    """A number for the table: 4 significant digits, '–' for none."""
    if v is None:
        return "–"
    return f"{v:.4g}" if abs(v) >= 1e-3 or v == 0 else f"{v:.3e}"


def fmt_interval(lo: float | None, hi: float | None) -> str:
    return "–" if lo is None or hi is None else f"[{fmt(lo)}, {fmt(hi)}]"
