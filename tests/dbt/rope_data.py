"""A warehouse with planted RoPE band results for the rope marts (tests/dbt/test_rope_marts.py).

Two registry models of interval_data.CI_MODELS (heads over 8 layers, the empirical estimator
filled in), plus rows of the three `rope` tables written by hand:

* ``rope_planes``: d = 8, layout half, planes 0, 1 high, 2 mid, 3 low, with random energies
  whose shares sum to 1 per head.  In ``NOPE_MODEL`` layer ``NOPE_LAYER`` is a NoPE layer: its
  heads have 8 unrotated planes of width 1 and no other band.
* ``rope_band_plasticity``: band ``low``, variant ``only`` is a copy of the head's
  plasticity_buckets (a band that behaves like every dim), so its model values must equal the
  full head's; the other bands scale the AP (``SCALES``).  NoPE heads have band ``unrotated``
  only.
* ``rope_band_logits``: per head, band and distance bin the n, sum and sum of squares of
  planted pair values (returned, so a test can pool them directly).
"""

from __future__ import annotations

import json
import math

import interval_data
import numpy as np
import synthetic_marts as sm

from qkwh.params import RunConfig

MODELS = interval_data.CI_MODELS[:2]
FULL_MODEL = MODELS[0].model_id  # every head has band low / only = the full head
NOPE_MODEL = MODELS[1].model_id
NOPE_LAYER = 21
ROPE_CONFIG = "cfg-rope"
INV_FREQ = [
    1.0,
    1e-2,
    2e-4,
    1e-6,
]  # radians per token of planes 0..3 (bands for m = 8192, L = 131072)
BANDS = ["high", "high", "mid", "low"]  # band of planes 0..3
#: (band, variant) -> factor on the head's bucket AP (low / only: the full head itself)
SCALES = {
    ("low", "only"): 1.0,
    ("high", "only"): 0.5,
    ("high", "without"): 0.9,
    ("mid", "only"): 0.75,
}
NOPE_SCALES = {("unrotated", "only"): 0.6}
N_BINS = 4


def _planes(rng: np.random.Generator, nope: bool) -> list[dict]:
    if nope:
        q, k = rng.uniform(0.5, 2.0, 8), rng.uniform(0.5, 2.0, 8)
        meta = [(i, i, None, 0.0, math.inf, "unrotated") for i in range(8)]
    else:
        # low-frequency planes carry most of the energy (the "massive values" picture)
        q = rng.uniform(0.5, 2.0, 4) * np.array([1.0, 1.0, 2.0, 6.0])
        k = rng.uniform(0.5, 2.0, 4) * np.array([1.0, 1.0, 2.0, 6.0])
        meta = [(i, i, i + 4, INV_FREQ[i], 2 * math.pi / INV_FREQ[i], BANDS[i]) for i in range(4)]
    rows = []
    for (plane, a, b, inv, wl, band), qe, ke in zip(meta, q, k):
        rows.append(
            dict(
                plane=plane,
                dim_a=a,
                dim_b=b,
                inv_freq=inv,
                wavelength=wl,
                band=band,
                q_energy=float(qe),
                k_energy=float(ke),
                q_energy_share=float(qe / q.sum()),
                k_energy_share=float(ke / k.sum()),
                logit_mean=float(rng.normal()),
                logit_sd=1.0,
            )
        )
    return rows


def rope_rows(tables: dict[str, list[dict]], spec: sm.ModelSpec, seed: int):
    """Rows of the rope tables for the heads of ``tables`` (one model), and the planted pair
    values {(layer, q_head, band, distance_bin): array}."""
    rng = np.random.default_rng(seed)
    out: dict[str, list[dict]] = {
        "rope_planes": [],
        "rope_band_plasticity": [],
        "rope_band_logits": [],
    }
    pairs: dict[tuple, np.ndarray] = {}
    heads = [(h["layer"], h["q_head"], h["k_head"]) for h in tables["plasticity_heads"]]
    for layer, q_head, k_head in heads:
        key = dict(model_id=spec.model_id, layer=layer, q_head=q_head, k_head=k_head)
        nope = spec.model_id == NOPE_MODEL and layer == NOPE_LAYER
        planes = _planes(rng, nope)
        for p in planes:
            out["rope_planes"].append(dict(**key, **p, config_id=ROPE_CONFIG))
        scales = NOPE_SCALES if nope else SCALES
        buckets = [
            b for b in tables["plasticity_buckets"] if (b["layer"], b["q_head"]) == (layer, q_head)
        ]
        for (band, variant), s in scales.items():
            for b in buckets:
                row = {
                    c: b[c]
                    for c in b
                    if c not in ("model_id", "layer", "q_head", "k_head", "config_id")
                }
                if s != 1.0:
                    row["ap_bucket"] = b["ap_bucket"] * s
                    row["ap_bucket_empirical"] = b["ap_bucket_empirical"] * s
                out["rope_band_plasticity"].append(
                    dict(**key, **row, band=band, variant=variant, config_id=ROPE_CONFIG)
                )
        for band in sorted({p["band"] for p in planes}):
            for dbin in range(N_BINS):
                n = 3 + (layer + q_head + 2 * dbin) % 6
                v = rng.normal(2.0 - 0.5 * dbin, 1.0 + 0.1 * dbin, n)
                pairs[(spec.model_id, layer, q_head, band, dbin)] = v
                out["rope_band_logits"].append(
                    dict(
                        **key,
                        band=band,
                        distance_bin=dbin,
                        n_pairs=n,
                        logit_sum=float(v.sum()),
                        logit_sum_sq=float((v * v).sum()),
                        logit_mean=float(v.mean()),
                        logit_sd=float(v.std(ddof=1)),
                        config_id=ROPE_CONFIG,
                    )
                )
    return out, pairs


def fill(con, *, with_rope: bool = True) -> dict:
    """The models of MODELS, with their rope rows when ``with_rope``; returns the planted
    {'pairs': ..., 'planes': rows of rope_planes}."""
    sm.insert(con, "run_config", sm.run_config_rows())
    sm.insert(
        con,
        "run_config",
        [
            dict(
                config_id=ROPE_CONFIG,
                analysis="rope",
                code_version="test",
                params_json=json.dumps(RunConfig().analysis_params("rope"), sort_keys=True),
                created_at=sm.NOW,
            )
        ],
    )
    truth: dict = {"pairs": {}, "planes": []}
    for i, spec in enumerate(MODELS):
        tables = interval_data.with_empirical(spec, sm.model_rows(spec))
        for table, rows in tables.items():
            sm.insert(con, table, rows)
        sm.insert(con, "current_config", sm.current_config_rows(spec))
        if not with_rope:
            continue
        rope, pairs = rope_rows(tables, spec, seed=100 + i)
        for table, rows in rope.items():
            sm.insert(con, table, rows)
        sm.insert(
            con,
            "current_config",
            [dict(model_id=spec.model_id, analysis="rope", config_id=ROPE_CONFIG, set_at=sm.NOW)],
        )
        truth["pairs"].update(pairs)
        truth["planes"].extend(rope["rope_planes"])
    return truth
