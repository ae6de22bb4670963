"""Layer-cluster bootstrap draws: how often each layer of a model enters each replicate.

One row per (model_id, replicate).  Replicate 0 takes every layer once (it reproduces the point
estimate); replicates 1..n_boot draw n_layers layers with replacement.  `multiplicity` lists the
count of each layer in cluster_index order (int_bootstrap_clusters), so a replicate's mean over
heads is dot(multiplicity, layer sums) / dot(multiplicity, layer counts).

Each model has its own random stream, numpy default_rng([seed, h(model_id)]) with h a stable
hash of the model id (qkwh.bootstrap.stream, the one implementation; the draws are
qkwh.bootstrap.draw_layers): adding or removing a model leaves every other model's draws unchanged,
and a rerun with the same seed gives identical draws.  Models with fewer than min_layers layers
get replicate 0 only (no interval).
"""

import numpy as np
import pyarrow as pa

from qkwh.bootstrap import draw_layers, stream


def model(dbt, session):
    dbt.config(materialized="table")
    n_boot = int(dbt.config.get("n_boot"))
    seed = int(dbt.config.get("seed"))
    min_layers = int(dbt.config.get("min_layers"))
    clusters = (
        dbt.ref("int_bootstrap_clusters")
        .aggregate("model_id, count(*) as n_layers", "model_id")
        .order("model_id")
        .to_arrow_table()
        .to_pylist()
    )
    ids, reps, n_lay, mults = [], [], [], []
    for row in clusters:
        n = int(row["n_layers"])
        b = n_boot if n >= min_layers else 0
        m = draw_layers(n, b, stream(seed, row["model_id"]))
        ids += [row["model_id"]] * (b + 1)
        reps.append(np.arange(b + 1, dtype=np.int32))
        n_lay.append(np.full(b + 1, n, dtype=np.int32))
        mults.append(m.ravel())
    # the multiplicity lists straight from the arrays: one list of n_layers values per row
    offsets = np.concatenate([[0], np.cumsum(np.concatenate(n_lay))]) if n_lay else np.zeros(1)
    values = np.concatenate(mults) if mults else np.zeros(0)
    return pa.table(
        {
            "model_id": pa.array(ids, pa.string()),
            "replicate": pa.array(np.concatenate(reps) if reps else [], pa.int32()),
            "n_layers": pa.array(np.concatenate(n_lay) if n_lay else [], pa.int32()),
            "multiplicity": pa.ListArray.from_arrays(
                pa.array(offsets, pa.int32()), pa.array(values, pa.float64())
            ),
        }
    )
