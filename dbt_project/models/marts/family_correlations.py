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

from qkwh.analyses.correlation import weighted_pearson
from qkwh.bootstrap import correlation_row, correlation_table, correlation_with_intervals

KEY_FIELDS = (
    ("x_metric", pa.string()),
    ("y_metric", pa.string()),
    ("scope_kind", pa.string()),
    ("scope", pa.string()),
    ("family", pa.string()),
)

#: about this many weights (replicates x heads) are built and correlated at a time
BLOCK = 1 << 16


def model_draws(table: pa.Table) -> dict[str, np.ndarray]:
    """Each model's replicates 1.. as a (n_boot, n_layers) float64 array, from the rows
    (model_id, multiplicity) of int_bootstrap_draws ordered by model and replicate."""
    table = table.combine_chunks()
    ids = table.column("model_id").to_pylist()
    mult = table.column("multiplicity").chunk(0) if table.num_rows else None
    out: dict[str, np.ndarray] = {}
    start = 0
    for end in range(1, len(ids) + 1):
        if end == len(ids) or ids[end] != ids[start]:
            rows = mult.slice(start, end - start)
            width = rows.value_lengths().to_numpy(zero_copy_only=False)
            if np.any(width != width[0]):
                raise ValueError(f"int_bootstrap_draws: ragged multiplicity lists for {ids[start]}")
            values = rows.flatten().to_numpy(zero_copy_only=False)
            out[ids[start]] = np.asarray(values, np.float64).reshape(end - start, int(width[0]))
            start = end
    return out


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
    )
    head_model = heads.column("model_id").to_pylist()
    head_layer = heads.column("layer").to_pylist()
    head_family = heads.column("family").to_pylist()
    model_arr = np.array(head_model, dtype=object)
    family_arr = np.array(head_family, dtype=object)
    # a NULL metric is NaN here: both are left out of every set
    value = {
        c: np.asarray(heads.column(c).to_numpy(zero_copy_only=False), np.float64) for c in cols
    }
    clusters = {
        (r["model_id"], r["layer"]): r["cluster_index"] - 1
        for r in dbt.ref("int_bootstrap_clusters").to_arrow_table().to_pylist()
    }
    draws = model_draws(
        dbt.ref("int_bootstrap_draws")
        .filter("replicate > 0")
        .order("model_id, replicate")
        .project("model_id, multiplicity")
        .to_arrow_table()
    )

    out: list[dict[str, object]] = []
    for x_name, y_name in pairs:
        rows = np.flatnonzero(np.isfinite(value[x_name]) & np.isfinite(value[y_name]))
        sets = [("all", "all", None, rows)] if head_model else []
        for fam in sorted({f for f in head_family if f is not None}):
            sets.append(("family", fam, fam, rows[family_arr[rows] == fam]))
        for mid in sorted(set(head_model)):
            fams = set(family_arr[model_arr == mid])
            sets.append(("model", mid, next(iter(fams)), rows[model_arr[rows] == mid]))
        for kind, scope, fam, sub in sets:
            x = value[x_name][sub]
            y = value[y_name][sub]
            models = sorted({head_model[i] for i in sub})
            fixed = [m for m in models if m not in draws]
            boot = None
            note = None
            if len(sub) and len(fixed) < len(models):
                # each head's weight: its model's multiplicity of its layer (a model without
                # draws stays at 1), taken from the models' multiplicities side by side
                parts = [np.ones((n_boot, 1))]
                offset = {}
                for mid in models:
                    if mid in draws:
                        offset[mid] = sum(p.shape[1] for p in parts)
                        parts.append(draws[mid][:n_boot])
                mult = np.hstack(parts)
                take = np.array(
                    [
                        offset[head_model[i]] + clusters[(head_model[i], head_layer[i])]
                        if head_model[i] in offset
                        else 0
                        for i in sub
                    ],
                    np.intp,
                )
                # a block of replicates at a time (each replicate's r is computed on its own row)
                boot = np.empty(n_boot)
                step = max(1, BLOCK // len(sub))
                for a in range(0, n_boot, step):
                    b = min(a + step, n_boot)
                    w = mult[a:b].take(take, axis=1)
                    boot[a:b] = weighted_pearson(x, y, w, min_n=min_n, if_constant=math.nan)
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
