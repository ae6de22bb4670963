"""Pearson r of each model metric against each benchmark score over the ingested models (the
observations of benchmark_joins), with n, a Fisher-z interval, a two-stage bootstrap interval
and a two-sided p-value.

One row per (benchmark, mode, length_scope, context_length_tokens, metric), plus one row per
(benchmark, mode) pooling the matched length bins over every benchmark length
(length_scope = 'pooled_lengths').

Two-stage bootstrap: each replicate resamples the observations (models) with replacement and,
for every drawn model, takes one of its layer-cluster bootstrap replicates of the metric at
random (int_model_metric_replicates), so the interval carries both the choice of models and the
uncertainty of each model's value.  Length-bin values have no layer replicates: for them only
the models are resampled (method says so).  Each group has its own random stream, seeded from
the seed and a stable hash of the group key.
"""

import numpy as np
import pyarrow as pa

from qkwh.bootstrap import (
    correlation_row,
    correlation_table,
    correlation_with_intervals,
    stream,
    two_stage_bootstrap_r,
)

KEY_FIELDS = (
    ("benchmark", pa.string()),
    ("mode", pa.string()),
    ("length_scope", pa.string()),
    ("context_length_tokens", pa.int32()),
    ("metric", pa.string()),
)
KEY = tuple(name for name, _ in KEY_FIELDS)


def model(dbt, session):
    dbt.config(materialized="table")
    min_n = int(dbt.config.get("min_corr_n"))
    level = float(dbt.config.get("level"))
    n_boot = int(dbt.config.get("n_boot"))
    seed = int(dbt.config.get("seed"))
    obs = (
        dbt.ref("benchmark_joins")
        .order("benchmark, mode, length_scope, context_length_tokens, metric, model_id")
        .to_arrow_table()
        .to_pylist()
    )
    metrics = sorted({o["metric"] for o in obs})
    reps: dict[tuple[str, str], np.ndarray] = {}
    if metrics:
        rel = (
            dbt.ref("int_model_metric_replicates")
            .filter("replicate > 0")
            .filter(
                "metric IN (" + ", ".join("'" + m.replace("'", "''") + "'" for m in metrics) + ")"
            )
        )
        table = rel.aggregate(
            "model_id, metric, list(value order by replicate) as vals", "model_id, metric"
        ).to_arrow_table()
        vals = table.column("vals").combine_chunks()
        # a NULL value is NaN
        flat = np.asarray(vals.values.to_numpy(zero_copy_only=False), np.float64)
        bounds = vals.offsets.to_numpy()  # raw offsets into vals.values
        for i, key in enumerate(
            zip(table.column("model_id").to_pylist(), table.column("metric").to_pylist())
        ):
            reps[key] = flat[bounds[i] : bounds[i + 1]]

    groups: dict[tuple, list[dict]] = {}
    for o in obs:
        if o["score"] is None or o["metric_value"] is None:
            continue
        groups.setdefault(tuple(o[k] for k in KEY), []).append(o)
        if o["metric"] == "matched_len_bin":
            groups.setdefault(
                (o["benchmark"], o["mode"], "pooled_lengths", None, o["metric"]), []
            ).append(o)

    out: list[dict[str, object]] = []
    for key in sorted(groups, key=lambda k: tuple("" if v is None else str(v) for v in k)):
        rows = groups[key]
        x = np.array([r["metric_value"] for r in rows], np.float64)
        y = np.array([r["score"] for r in rows], np.float64)
        with_reps = [reps.get((r["model_id"], r["metric"])) for r in rows]
        fixed = sorted({r["model_id"] for r, v in zip(rows, with_reps) if v is None})
        width = max((len(v) for v in with_reps if v is not None), default=1)
        mat = np.empty((len(rows), width))
        for i, v in enumerate(with_reps):
            mat[i] = v if v is not None and len(v) == width else x[i]
        rng = stream(seed, "|".join("" if v is None else str(v) for v in key))
        boot = two_stage_bootstrap_r(mat, y, n_boot, rng, min_n=min_n) if n_boot > 0 else None
        res = correlation_with_intervals(x, y, boot, level=level, min_n=min_n)
        if key[4] == "matched_len_bin":
            method = "pearson; fisher_z; bootstrap over models (bin values fixed)"
            note = None
        else:
            method = "pearson; fisher_z; two_stage_bootstrap_percentile"
            note = (
                (
                    "metric held fixed (no layer replicates, fewer than min_layers layers): "
                    + ", ".join(fixed)
                )
                if fixed
                else None
            )
        out.append(
            {
                **dict(zip(KEY, key)),
                **correlation_row(
                    res,
                    n_models=len({r["model_id"] for r in rows}),
                    n_boot=n_boot,
                    level=level,
                    seed=seed,
                    method=method,
                    note=note,
                ),
            }
        )
    return correlation_table(KEY_FIELDS, out)
