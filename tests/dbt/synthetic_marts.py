"""Hand-made catalog + compute rows for the dbt tests, and the expected mart values.

The rows follow warehouse/schema.sql; the numbers are planted so that the marts can be checked
against arithmetic done here in plain Python (spec §2.3.8, §3, §4):

* ``qwen3-4b`` (registry, Qwen3): plasticity decays fast, AP_j = 0.76 - 0.24 f_j (+ head offset)
* ``ministral3-3b`` (registry, Ministral3): slow decay, AP_j = 0.68 - 0.08 f_j
* three SmolLM3 checkpoints (pretrain 4K, anneal 4K, LC 64K): fill training_trajectory and
  bias_decomposition, and the short- / long-context bin sets
* ``synth-noreg`` (not in the registry; catalog only): exercises the catalog-only path, a
  cross-attention layer flag and a degenerate rotation head
* ``llama3.2-3b`` is kept aside as the model added later (``add_model``).

Nothing here imports the marts' SQL: expectations are computed independently.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from dataclasses import dataclass, field

import pyarrow as pa

from qkwh.params import RunConfig

NOW = dt.datetime(2025, 1, 1, 12, 0, 0)
CONFIG_IDS = {"pca": "cfg-pca", "rotation": "cfg-rot", "plasticity": "cfg-pl"}
TAXONOMY_CASES = [  # (r_q0, r_k0, class) including ties that must fall to `mixed`
    (0.90, 0.85, "position_dominated"),
    (0.82, -0.10, "q_positional"),
    (0.10, -0.80, "k_positional"),
    (0.05, 0.20, "content_focused"),
    (0.60, 0.50, "mixed"),
    (0.70, 0.90, "mixed"),  # r_q exactly at HIGH: not > 0.7
    (0.95, 0.30, "mixed"),  # |r_k| exactly at LOW: not < 0.3
]


@dataclass
class ModelSpec:
    model_id: str
    family: str
    context_length: int
    bucket_size: int
    num_layers: int
    heads: list[tuple[int, int]]  # (layer, q_head)
    ap0: float  # planted AP at f = 0
    slope: float  # planted decay per unit of relative position
    mu_q_a: float
    alpha_k: float
    in_registry: bool = True
    checkpoint_phase: str | None = None
    checkpoint_step: int | None = None
    checkpoint_order: int | None = None
    nope_layers: str | None = None
    cross_attention_layers: str | None = None
    d: int = 8
    gqa_ratio: int = 4
    degenerate_head: tuple[int, int] | None = None
    nan_bucket_head: tuple[int, int] | None = None  # its bucket 0 has no admissible pairs
    extra: dict = field(default_factory=dict)

    @property
    def n_buckets(self) -> int:
        return self.context_length // self.bucket_size


SMOL_NOPE = ";".join(str(i) for i in range(3, 36, 4))

BASE_MODELS = [
    ModelSpec(
        "qwen3-4b",
        "Qwen3",
        131072,
        8192,
        36,
        [(0, 0), (0, 5), (10, 3), (35, 31)],
        ap0=0.76,
        slope=0.24,
        mu_q_a=2.0,
        alpha_k=5e-4,
        nan_bucket_head=(10, 3),
    ),
    ModelSpec(
        "ministral3-3b",
        "Ministral3",
        131072,
        8192,
        26,
        [(1, 2), (12, 7), (25, 30)],
        ap0=0.68,
        slope=0.08,
        mu_q_a=1.5,
        alpha_k=2e-4,
    ),
    ModelSpec(
        "smollm3-3b-stage1-step-40000",
        "SmolLM3",
        4096,
        256,
        36,
        [(3, 1), (4, 2), (7, 9)],
        ap0=0.62,
        slope=0.05,
        mu_q_a=2.4,
        alpha_k=3.2e-3,
        checkpoint_phase="pretrain",
        checkpoint_step=40000,
        checkpoint_order=1,
        nope_layers=SMOL_NOPE,
    ),
    ModelSpec(
        "smollm3-3b-stage3-step-4720000",
        "SmolLM3",
        4096,
        256,
        36,
        [(3, 1), (4, 2), (7, 9)],
        ap0=0.57,
        slope=0.08,
        mu_q_a=4.65,
        alpha_k=4.0e-3,
        checkpoint_phase="anneal",
        checkpoint_step=4720000,
        checkpoint_order=6,
        nope_layers=SMOL_NOPE,
    ),
    ModelSpec(
        "smollm3-3b-lc-32k-to-64k-step-4000",
        "SmolLM3",
        65536,
        4096,
        36,
        [(3, 1), (4, 2), (7, 9)],
        ap0=0.70,
        slope=0.28,
        mu_q_a=6.5,
        alpha_k=2.7e-4,
        checkpoint_phase="lc_32k_64k",
        checkpoint_step=4000,
        checkpoint_order=9,
        nope_layers=SMOL_NOPE,
    ),
    ModelSpec(
        "synth-noreg",
        "Synth",
        8192,
        512,
        6,
        [(0, 0), (1, 1), (3, 0)],
        ap0=0.60,
        slope=0.15,
        mu_q_a=1.0,
        alpha_k=1e-3,
        in_registry=False,
        cross_attention_layers="2",
        degenerate_head=(3, 0),
        gqa_ratio=1,
    ),
]
EXTRA_MODEL = ModelSpec(
    "llama3.2-3b",
    "Llama3.2",
    131072,
    8192,
    28,
    [(2, 4), (14, 11), (27, 23)],
    ap0=0.74,
    slope=0.26,
    mu_q_a=1.8,
    alpha_k=3.5e-4,
)


# ------------------------------------------------------------------------------------------
# planted per-head values
# ------------------------------------------------------------------------------------------


def head_offset(spec: ModelSpec, idx: int) -> float:
    return 0.01 * ((idx % 3) - 1)  # -0.01, 0, +0.01


def bucket_rows(spec: ModelSpec, idx: int, layer: int, q_head: int) -> list[dict]:
    """16 (or n_buckets) buckets with an empirical position jittered around the midpoint."""
    rows = []
    L, m = spec.context_length, spec.bucket_size
    for j in range(spec.n_buckets):
        jitter = ((layer * 7 + q_head * 3 + j * 5) % 11 - 5) * (m / 200.0)
        tau = (j + 0.5) * m + jitter
        f = tau / L
        n_q = 400 + 13 * j + 7 * idx
        ap = spec.ap0 + head_offset(spec, idx) - spec.slope * f + 0.004 * math.sin(j + idx)
        no_pairs = spec.nan_bucket_head == (layer, q_head) and j == 0
        rows.append(
            dict(
                q_bucket=j,
                bucket_position=tau,
                bucket_midpoint=(j + 0.5) * m,
                bucket_frac=f,
                n_queries=n_q,
                n_eligible_keys=0 if no_pairs else 50 * (j + 1),
                n_admissible_pairs=0 if no_pairs else 1000 * (j + 1),
                n_pairs=0 if no_pairs else 1024,
                ap_bucket=float("nan") if no_pairs else ap,
                ap_bucket_se=float("nan") if no_pairs else 0.01,
                mean_abs_z=1.0,
                mode="sampled/full/position",
            )
        )
    return rows


def head_deciles(buckets: list[dict]) -> dict[int, float]:
    """spec §2.3.8 for one head: n-weighted mean AP per floor(10 f) (clipped to 9)."""
    acc: dict[int, list[float]] = {}
    for b in buckets:
        if math.isnan(b["ap_bucket"]) or b["n_queries"] <= 0:
            continue
        k = min(max(math.floor(10 * b["bucket_frac"]), 0), 9)
        s = acc.setdefault(k, [0.0, 0.0])
        s[0] += b["n_queries"] * b["ap_bucket"]
        s[1] += b["n_queries"]
    return {k: s[0] / s[1] for k, s in acc.items()}


def head_ap_overall(buckets: list[dict]) -> float:
    num = sum(b["n_queries"] * b["ap_bucket"] for b in buckets if not math.isnan(b["ap_bucket"]))
    den = sum(b["n_queries"] for b in buckets if not math.isnan(b["ap_bucket"]))
    return num / den


def taxonomy(r_q: float, r_k: float, high: float = 0.7, low: float = 0.3) -> str:
    if r_q > high and abs(r_k) > high:
        return "position_dominated"
    if r_q > high and abs(r_k) < low:
        return "q_positional"
    if r_q < low and abs(r_k) > high:
        return "k_positional"
    if r_q < low and abs(r_k) < low:
        return "content_focused"
    return "mixed"


def rotation_values(spec: ModelSpec, idx: int, layer: int) -> dict:
    mu = spec.mu_q_a * (1 + 0.1 * (idx - 1))
    ak = spec.alpha_k * (1 + 0.05 * idx)
    return dict(
        mu_q_a=mu,
        alpha_k=ak,
        bias_strength=mu * ak,
        separation_strength=0.25 + 0.02 * idx + 0.001 * layer,
    )


# ------------------------------------------------------------------------------------------
# rows per table
# ------------------------------------------------------------------------------------------


def model_rows(spec: ModelSpec) -> dict[str, list[dict]]:
    t: dict[str, list[dict]] = {
        k: []
        for k in (
            "models",
            "heads",
            "pca_components",
            "pca_heads",
            "rotation_heads",
            "rotation_pairs",
            "rotation_axes",
            "plasticity_heads",
            "plasticity_buckets",
            "plasticity_heatmap",
            "plasticity_components",
        )
    }
    t["models"].append(
        dict(
            model_id=spec.model_id,
            source=f"/data/{spec.model_id}",
            source_kind="local",
            root_path=f"/data/{spec.model_id}",
            source_fingerprint="fp-" + spec.model_id,
            hf_model=None,
            family=spec.family,
            params_b=1.0,
            num_layers=spec.num_layers,
            num_q_heads=32,
            num_kv_heads=32 // spec.gqa_ratio,
            gqa_ratio=spec.gqa_ratio,
            head_dim=spec.d,
            context_length=spec.context_length,
            context_length_rule="registry" if spec.in_registry else "metadata",
            bucket_size=spec.bucket_size,
            sampling_strategy="uniform",
            rope_theta=1e6,
            rope_scaling="none",
            nope_layers=spec.nope_layers,
            cross_attention_layers=spec.cross_attention_layers,
            checkpoint_phase=spec.checkpoint_phase,
            checkpoint_step=spec.checkpoint_step,
            checkpoint_order=spec.checkpoint_order,
            study=None,
            dataset_branch=None,
            in_registry=spec.in_registry,
            n_files=2 * len(spec.heads),
            n_rows=1000,
            metadata_json="{}",
            ingested_at=NOW,
        )
    )
    for idx, (layer, q_head) in enumerate(spec.heads):
        k_head = q_head // spec.gqa_ratio
        key = dict(model_id=spec.model_id, layer=layer, q_head=q_head, k_head=k_head)
        t["heads"].append(dict(**dict(key.items()), has_k_file=True, n_q=8000, n_k=8000))
        # --- PCA: PC0 correlations cycle through the taxonomy cases
        r_q0, r_k0, _ = TAXONOMY_CASES[(idx + len(spec.model_id)) % len(TAXONOMY_CASES)]
        for pc in range(10):
            t["pca_components"].append(
                dict(
                    **key,
                    pc=pc,
                    explained_variance_ratio=0.30 / (pc + 1),
                    r_q=r_q0 if pc == 0 else 0.1 / (pc + 1),
                    r_k=r_k0 if pc == 0 else -0.05,
                    p_q=0.0,
                    p_k=0.0,
                    sign_flipped=False,
                    anchor="q",
                    mean_q=1.0,
                    mean_k=-1.0,
                    var_q=1.0,
                    var_k=1.0,
                    config_id=CONFIG_IDS["pca"],
                )
            )
        t["pca_heads"].append(
            dict(
                **key,
                n_q=8000,
                n_k=8000,
                d=spec.d,
                ev0=0.30,
                ev1=0.15,
                r_q0=r_q0,
                r_k0=r_k0,
                pos_var_q_thesis=0.27,
                pos_var_k_thesis=0.14,
                pc0_share_pos_q=0.9,
                pc0_share_pos_k=0.74,
                pos_var_q_exact=0.3,
                pos_var_k_exact=0.15,
                qk_sep_pc0=47.0,
                fisher_pc0=44.0,
                qk_acc_pc01=0.99,
                config_id=CONFIG_IDS["pca"],
            )
        )
        # --- rotation
        rv = rotation_values(spec, idx, layer)
        degenerate = spec.degenerate_head == (layer, q_head)
        nan = float("nan")
        t["rotation_heads"].append(
            dict(
                **key,
                n_q=8000,
                n_k=8000,
                d=spec.d,
                degenerate=degenerate,
                b_mode="eig",
                pairing="independent",
                position_r=0.8,
                r_q_a=0.75,
                r_k_a=-0.85,
                alpha_q=1e-4,
                alpha_k=nan if degenerate else rv["alpha_k"],
                intercept_q_a=0.0,
                intercept_k_a=0.0,
                mu_q_a=nan if degenerate else rv["mu_q_a"],
                mu_k_a=-1.0,
                mu_q_b=2.0,
                mu_k_b=-2.0,
                bias_strength=nan if degenerate else rv["bias_strength"],
                bias_strength_ctx=nan if degenerate else rv["bias_strength"] * spec.context_length,
                slope_ratio_kq=2.0,
                separation_strength=nan if degenerate else rv["separation_strength"],
                var_frac_a=0.1,
                var_frac_b=0.25,
                plane_var_fraction=0.35,
                content_var_b=1.0,
                content_var_b_frac=0.05,
                residual_pos_r=1e-15,
                omega=1e-5,
                omega_r_squared=0.5,
                n_active_pairs=2,
                active_var_frac=0.6,
                cos_b_bc=0.99,
                config_id=CONFIG_IDS["rotation"],
            )
        )
        for pair in range(2):
            t["rotation_pairs"].append(
                dict(
                    **key,
                    pair=pair,
                    sv_var_share=0.1,
                    angle_r=0.01,
                    angle_r_circ=0.5,
                    omega_pair=1e-3,
                    angle_r_circ_pm=0.5,
                    omega_pair_pm=1e-3,
                    qk_acc=0.5,
                    active=True,
                    config_id=CONFIG_IDS["rotation"],
                )
            )
        for axis in ("a", "b", "b_centroid"):
            t["rotation_axes"].append(
                dict(
                    **key,
                    axis=axis,
                    vec=[1.0] + [0.0] * (spec.d - 1),
                    config_id=CONFIG_IDS["rotation"],
                )
            )
        # --- plasticity
        buckets = bucket_rows(spec, idx, layer, q_head)
        for b in buckets:
            t["plasticity_buckets"].append(dict(**key, **b, config_id=CONFIG_IDS["plasticity"]))
        t["plasticity_heads"].append(
            dict(
                **key,
                n_q=8000,
                n_k=8000,
                d=spec.d,
                q_R2_pos=0.05 + 0.01 * idx,
                q_beta_norm=1e-4 * (idx + 1),
                q_R2_scalar=0.1,
                q_mae_baseline=1.0,
                q_mae_proj=0.9,
                q_mae_ratio=0.9,
                q_resid0_skew=0.0,
                q_resid0_kurt=0.0,
                q_resid0_ks_p=0.5,
                q_noise_med_abs_skew=0.1,
                q_noise_med_abs_kurt=0.1,
                q_noise_med_ks_p=0.4,
                q_noise_frac_ks_p_lt_alpha=0.1,
                alpha_pos=0.0,
                beta_pos=1e-4,
                sigma2_pos=1.0,
                seed_used=0,
                context_length=spec.context_length,
                cov_mode="full",
                eligibility="position",
                pairs="sampled",
                empirical=False,
                config_id=CONFIG_IDS["plasticity"],
            )
        )
        for qb in range(2):
            for dx in range(2):
                t["plasticity_heatmap"].append(
                    dict(
                        **key,
                        q_bucket=qb,
                        dx_bin=dx,
                        dm_bin=0,
                        n=40 if dx == 0 else 5,  # dx 0 pools >= 50 over heads; dx 1 stays masked
                        sum_pp=(40 if dx == 0 else 5) * 0.5,
                        sum_pp2=(40 if dx == 0 else 5) * 0.3,
                        config_id=CONFIG_IDS["plasticity"],
                    )
                )
        weights = [float(c + 1) for c in range(spec.d)]
        total = sum(weights)
        for c in range(spec.d):
            t["plasticity_components"].append(
                dict(
                    **key,
                    component=c,
                    component_r2=weights[c] / 100.0,
                    component_weight=weights[c] / total,
                    config_id=CONFIG_IDS["plasticity"],
                )
            )
    return t


def run_config_rows() -> list[dict]:
    cfg = RunConfig()
    return [
        dict(
            config_id=cid,
            analysis=a,
            code_version="test",
            params_json=json.dumps(cfg.analysis_params(a), sort_keys=True),
            created_at=NOW,
        )
        for a, cid in CONFIG_IDS.items()
    ]


def insert(con, table: str, rows: list[dict]) -> None:
    if not rows:
        return
    data = pa.Table.from_pylist(rows)
    con.register("_rows", data)
    try:
        con.execute(f'INSERT INTO "{table}" BY NAME SELECT * FROM _rows')
    finally:
        con.unregister("_rows")


def current_config_rows(spec: ModelSpec) -> list[dict]:
    """The parameter set each analysis of the model reports (what `qkwh compute` records)."""
    return [
        dict(model_id=spec.model_id, analysis=a, config_id=cid, set_at=NOW)
        for a, cid in CONFIG_IDS.items()
    ]


def fill(con, specs: list[ModelSpec], *, with_run_config: bool = True) -> None:
    if with_run_config:
        insert(con, "run_config", run_config_rows())
    for spec in specs:
        for table, rows in model_rows(spec).items():
            insert(con, table, rows)
        insert(con, "current_config", current_config_rows(spec))


# ------------------------------------------------------------------------------------------
# expectations (plain Python, spec §2.3.8 / §4)
# ------------------------------------------------------------------------------------------


def expected_model_plasticity(spec: ModelSpec) -> dict[str, float]:
    per_head = []
    overall = []
    for idx, (layer, q_head) in enumerate(spec.heads):
        b = bucket_rows(spec, idx, layer, q_head)
        per_head.append(head_deciles(b))
        overall.append(head_ap_overall(b))
    out: dict[str, float] = {}
    for k in range(10):
        vals = [h[k] for h in per_head if k in h]
        out[f"decile_{k}"] = sum(vals) / len(vals)
    out["ap_first_20pct"] = (out["decile_0"] + out["decile_1"]) / 2
    out["ap_last_20pct"] = (out["decile_8"] + out["decile_9"]) / 2
    out["ap_drop"] = out["ap_first_20pct"] - out["ap_last_20pct"]
    out["ap_overall"] = sum(overall) / len(overall)
    return out


def expected_bin(spec: ModelSpec, lo: float, hi: float, hi_inclusive: bool) -> float | None:
    """Mean over heads of the head's n-weighted mean AP over buckets with tau in the bin."""
    vals = []
    for idx, (layer, q_head) in enumerate(spec.heads):
        num = den = 0.0
        for b in bucket_rows(spec, idx, layer, q_head):
            tau = b["bucket_position"]
            inside = lo <= tau < hi or (hi_inclusive and tau == hi)
            if inside and not math.isnan(b["ap_bucket"]):
                num += b["n_queries"] * b["ap_bucket"]
                den += b["n_queries"]
        if den:
            vals.append(num / den)
    return sum(vals) / len(vals) if vals else None


def expected_bias(spec: ModelSpec) -> dict[str, float]:
    rows = [
        rotation_values(spec, idx, layer)
        for idx, (layer, q_head) in enumerate(spec.heads)
        if spec.degenerate_head != (layer, q_head)
    ]
    mean = lambda key: sum(r[key] for r in rows) / len(rows)  # noqa: E731
    return {
        "mu_q_a": mean("mu_q_a"),
        "alpha_k": mean("alpha_k"),
        "bias_strength": mean("bias_strength"),
        "bias_strength_ctx": mean("bias_strength") * spec.context_length,
    }


def head_points(specs: list[ModelSpec]) -> list[tuple[str, float, float]]:
    """(family, bias_strength, separation_strength) for every non-degenerate head."""
    pts = []
    for spec in specs:
        for idx, (layer, q_head) in enumerate(spec.heads):
            if spec.degenerate_head == (layer, q_head):
                continue
            rv = rotation_values(spec, idx, layer)
            pts.append((spec.family, rv["bias_strength"], rv["separation_strength"]))
    return pts


def pearson(xs: list[float], ys: list[float]) -> float:
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    sxx = sum((x - mx) ** 2 for x in xs)
    syy = sum((y - my) ** 2 for y in ys)
    return sxy / math.sqrt(sxx * syy)
