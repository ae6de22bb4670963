"""Warehouses with a known truth for the interval marts (model_metric_ci, model_comparisons,
family_correlations, benchmark_correlations).

* ``simulated_rows``: many models whose head values are drawn from a two-level model with a
  known model mean: value = mu_model + u_layer + e_head, u ~ N(0, tau^2), e ~ N(0, sigma^2).
  ``bias_strength`` has a strong layer effect (heads of a layer move together),
  ``separation_strength`` none.  Only the catalog and ``rotation_heads`` are filled.
* ``CI_MODELS``: registry models with benchmark scores, heads over 8 layers, and the empirical
  estimator filled in (a planted Gaussian-minus-empirical gap per model), built on the
  synthetic_marts generator.
"""

from __future__ import annotations

import math

import numpy as np
import synthetic_marts as sm

CI_VARS = {"n_boot": 200}  # dbt vars of the CI warehouse build
SIM_MODELS, SIM_LAYERS, SIM_HEADS_PER_LAYER, SIM_BOOT = 400, 80, 3, 400
SIM_TAU = 0.02  # sd of the layer effect in bias_strength
SIM_SIGMA = 0.01  # sd of the head noise
SIM_SEP_SIGMA = 0.05  # head noise of separation_strength (no layer effect)


def _model_row(model_id: str, family: str, num_layers: int, n_heads: int) -> dict:
    return dict(
        model_id=model_id,
        source=f"/sim/{model_id}",
        source_kind="local",
        root_path=f"/sim/{model_id}",
        source_fingerprint="fp-" + model_id,
        family=family,
        num_layers=num_layers,
        num_q_heads=8,
        num_kv_heads=8,
        gqa_ratio=1,
        head_dim=8,
        context_length=8192,
        context_length_rule="metadata",
        bucket_size=512,
        in_registry=False,
        n_files=2 * n_heads,
        n_rows=1000,
        ingested_at=sm.NOW,
    )


def simulated_rows(n_models: int, n_layers: int, heads_per_layer: int, seed: int):
    """Rows per table and the truth {model_id: (mu_bias, mu_sep)} of ``n_models`` models."""
    rng = np.random.default_rng(seed)
    tables: dict[str, list[dict]] = {
        "models": [],
        "heads": [],
        "rotation_heads": [],
        "current_config": [],
    }
    truth: dict[str, tuple[float, float]] = {}
    nan = float("nan")
    for i in range(n_models):
        mid = f"sim-{i:03d}"
        mu_b = float(rng.uniform(0.1, 0.3))
        mu_s = float(rng.uniform(0.2, 0.4))
        truth[mid] = (mu_b, mu_s)
        tables["models"].append(
            _model_row(mid, f"Sim{i % 4}", n_layers, n_layers * heads_per_layer)
        )
        tables["current_config"].append(
            dict(
                model_id=mid,
                analysis="rotation",
                config_id=sm.CONFIG_IDS["rotation"],
                set_at=sm.NOW,
            )
        )
        u = rng.normal(0.0, SIM_TAU, n_layers)
        for layer in range(n_layers):
            for h in range(heads_per_layer):
                key = dict(model_id=mid, layer=layer, q_head=h, k_head=h)
                tables["heads"].append(dict(**key, has_k_file=True, n_q=100, n_k=100))
                tables["rotation_heads"].append(
                    dict(
                        **key,
                        n_q=100,
                        n_k=100,
                        d=8,
                        degenerate=False,
                        b_mode="eig",
                        pairing="independent",
                        bias_strength=mu_b + u[layer] + float(rng.normal(0.0, SIM_SIGMA)),
                        separation_strength=mu_s + float(rng.normal(0.0, SIM_SEP_SIGMA)),
                        position_r=nan,
                        r_q_a=nan,
                        r_k_a=nan,
                        config_id=sm.CONFIG_IDS["rotation"],
                    )
                )
    return tables, truth


def fill_simulated(con, n_models: int, n_layers: int, heads_per_layer: int, seed: int):
    tables, truth = simulated_rows(n_models, n_layers, heads_per_layer, seed)
    sm.insert(con, "run_config", sm.run_config_rows())
    for name, rows in tables.items():
        sm.insert(con, name, rows)
    return truth


# ------------------------------------------------------------------------------------------
# registry models with benchmark scores and the empirical estimator
# ------------------------------------------------------------------------------------------

EIGHT_LAYERS = [(layer, h) for layer in (0, 3, 6, 9, 12, 15, 18, 21) for h in (0, 5)]
GAPS = {
    "qwen3-4b": 0.02,
    "qwen3-8b": 0.0,
    "ministral3-3b": 0.0,
    "ministral3-8b": 0.0,
    "llama3.2-3b": 0.0,
}
LABELS = {"qwen3-4b": "Qwen3 4B"}  # the others fall back to their model id
CI_MODELS = [
    sm.ModelSpec(
        "qwen3-4b",
        "Qwen3",
        131072,
        8192,
        36,
        EIGHT_LAYERS,
        ap0=0.76,
        slope=0.24,
        mu_q_a=2.0,
        alpha_k=5e-4,
    ),
    sm.ModelSpec(
        "qwen3-8b",
        "Qwen3",
        131072,
        8192,
        36,
        EIGHT_LAYERS,
        ap0=0.74,
        slope=0.22,
        mu_q_a=2.2,
        alpha_k=4e-4,
    ),
    sm.ModelSpec(
        "ministral3-3b",
        "Ministral3",
        131072,
        8192,
        26,
        EIGHT_LAYERS,
        ap0=0.68,
        slope=0.08,
        mu_q_a=1.5,
        alpha_k=2e-4,
    ),
    sm.ModelSpec(
        "ministral3-8b",
        "Ministral3",
        131072,
        8192,
        34,
        EIGHT_LAYERS,
        ap0=0.69,
        slope=0.09,
        mu_q_a=1.6,
        alpha_k=2.2e-4,
    ),
    sm.ModelSpec(
        "llama3.2-3b",
        "Llama3.2",
        131072,
        8192,
        28,
        EIGHT_LAYERS,
        ap0=0.74,
        slope=0.26,
        mu_q_a=1.8,
        alpha_k=3.5e-4,
    ),
]


def with_empirical(spec: sm.ModelSpec, tables: dict[str, list[dict]]) -> dict[str, list[dict]]:
    """Add the empirical estimator to a model's plasticity rows: empirical = Gaussian - gap
    (GAPS) plus a deterministic wiggle of +-0.002, SEs of 0.004 / 0.003."""
    gap = GAPS[spec.model_id]
    for b in tables["plasticity_buckets"]:
        wiggle = 0.002 * math.sin(3 * b["layer"] + 7 * b["q_head"] + b["q_bucket"])
        if math.isnan(b["ap_bucket"]):
            b.update(
                ap_bucket_empirical=float("nan"),
                ap_bucket_empirical_se=float("nan"),
                gauss_gap_se=float("nan"),
            )
        else:
            b.update(
                ap_bucket_empirical=b["ap_bucket"] - gap + wiggle,
                ap_bucket_empirical_se=0.004,
                gauss_gap_se=0.003,
            )
    for h in tables["plasticity_heads"]:
        h["empirical"] = True
    if spec.model_id in LABELS:
        tables["models"][0]["label"] = LABELS[spec.model_id]
    return tables


def fill_ci(con, specs: list[sm.ModelSpec] = CI_MODELS) -> None:
    sm.insert(con, "run_config", sm.run_config_rows())
    for spec in specs:
        for table, rows in with_empirical(spec, sm.model_rows(spec)).items():
            sm.insert(con, table, rows)
        sm.insert(con, "current_config", sm.current_config_rows(spec))
