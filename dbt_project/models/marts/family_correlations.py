"""Pearson r between head-level metrics (var correlation_pairs, default bias_strength vs
separation_strength) over a set of heads: all heads, each family, each model.  One row per
(pair, head set) with n, r, a Fisher-z interval, a two-sided p-value and a layer-cluster
bootstrap interval.

The Fisher-z interval and the p-value treat heads as independent; heads of one layer are not,
so the bootstrap interval, which redraws each model's layers (int_bootstrap_draws, replicate b
of every model together: a bootstrap stratified by model), is the honest one.  In the family and
all-heads sets a model with fewer than min_layers layers has no replicates and stays fixed
(noted); a set whose models all have too few layers gets no bootstrap interval.
"""

import ast
import math

import numpy as np
import pyarrow as pa
from threadpoolctl import threadpool_limits

from qkwh.analyses.correlation import weighted_pearson
from qkwh.bootstrap import correlation_row, correlation_table, correlation_with_intervals

KEY_FIELDS = (
    ("x_metric", pa.string()),
    ("y_metric", pa.string()),
    ("scope_kind", pa.string()),
    ("scope", pa.string()),
    ("family", pa.string()),
)


def model(dbt, session):
    dbt.config(materialized="table")
    pairs = dbt.config.get("correlation_pairs")
    pairs = ast.literal_eval(pairs) if isinstance(pairs, str) else pairs
    min_n = int(dbt.config.get("min_corr_n"))
    level = float(dbt.config.get("level"))
    n_boot = int(dbt.config.get("n_boot"))
    seed = int(dbt.config.get("seed"))
    cols = sorted({c for p in pairs for c in p})
    heads = (
        dbt.ref("head_metrics")
        .project("model_id, layer, q_head, family, " + ", ".join(f'"{c}"' for c in cols))
        .order("model_id, layer, q_head")
        .to_arrow_table()
        .to_pylist()
    )
    clusters = {
        (r["model_id"], r["layer"]): r["cluster_index"] - 1
        for r in dbt.ref("int_bootstrap_clusters").to_arrow_table().to_pylist()
    }
    draws: dict[str, np.ndarray] = {}
    for r in (
        dbt.ref("int_bootstrap_draws")
        .filter("replicate > 0")
        .order("model_id, replicate")
        .to_arrow_table()
        .to_pylist()
    ):
        draws.setdefault(r["model_id"], []).append(r["multiplicity"])
    draws = {k: np.asarray(v, np.float64) for k, v in draws.items()}

    out: list[dict[str, object]] = []
    for x_name, y_name in pairs:
        rows = [
            h
            for h in heads
            if h[x_name] is not None
            and h[y_name] is not None
            and math.isfinite(h[x_name])
            and math.isfinite(h[y_name])
        ]
        sets = [("all", "all", None, rows)] if heads else []
        for fam in sorted({h["family"] for h in heads if h["family"] is not None}):
            sets.append(("family", fam, fam, [h for h in rows if h["family"] == fam]))
        for mid in sorted({h["model_id"] for h in heads}):
            fams = {h["family"] for h in heads if h["model_id"] == mid}
            sets.append(("model", mid, next(iter(fams)), [h for h in rows if h["model_id"] == mid]))
        for kind, scope, fam, sub in sets:
            x = np.array([h[x_name] for h in sub], np.float64)
            y = np.array([h[y_name] for h in sub], np.float64)
            models = sorted({h["model_id"] for h in sub})
            fixed = [m for m in models if m not in draws]
            boot = None
            note = None
            if sub and len(fixed) < len(models):
                # each head's column: its model's multiplicities of its layer (a model without
                # draws stays at 1); the columns of one model are gathered at once
                w = np.ones((n_boot, len(sub)))
                cols: dict[str, tuple[list[int], list[int]]] = {}
                for i, h in enumerate(sub):
                    if h["model_id"] in draws:
                        at, layer = cols.setdefault(h["model_id"], ([], []))
                        at.append(i)
                        layer.append(clusters[(h["model_id"], h["layer"])])
                for mid, (at, layer) in cols.items():
                    w[:, at] = draws[mid][:n_boot][:, layer]
                with threadpool_limits(1):
                    boot = weighted_pearson(x, y, w, min_n=min_n, if_constant=math.nan)
            if fixed and len(fixed) == len(models):
                note = "no model of the set has min_layers layers: no bootstrap interval"
            elif fixed:
                note = "held fixed in the bootstrap (fewer than min_layers layers): " + ", ".join(
                    fixed
                )
            res = correlation_with_intervals(x, y, boot, level=level, min_n=min_n)
            out.append(
                {
                    "x_metric": x_name,
                    "y_metric": y_name,
                    "scope_kind": kind,
                    "scope": scope,
                    "family": fam,
                    **correlation_row(
                        res,
                        n_models=len(models),
                        n_boot=n_boot,
                        level=level,
                        seed=seed,
                        method="pearson; fisher_z; layer_cluster_bootstrap_percentile",
                        note=note,
                    ),
                }
            )
    return correlation_table(KEY_FIELDS, out)
