"""A warehouse for the document-level intervals and the dataset comparisons: one model captured
on three datasets, two of them with a document-group jackknife (rows inserted directly, as the
analysis `uncertainty` writes them), and the expected se_documents computed here in numpy.

* ``tiny-code`` and ``tiny-prose``: the same hf_model, planted plasticity slopes 0.30 and 0.20
  (so ap_drop differs clearly), 12 heads over 6 layers, a jackknife of G = 5 groups in which
  group 4 has no rows in any head (left out: G' = 4) and head (0, 0) has no rows of group 0 (it
  keeps its full value there).
* ``tiny-web``: the same planted values as ``tiny-prose`` (difference exactly 0), no jackknife.
* ``other``: another model (no hf_model): never paired.
* ``tiny-prose-again`` (dataset prose, like tiny-prose: not paired with it) and ``tiny-later`` (a
  later checkpoint of the model: paired with none).

Nothing here imports the marts' SQL: expectations are computed independently.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import synthetic_marts as sm

G = 5
EMPTY_GROUP = 4
SPARSE_HEAD, SPARSE_GROUP = (0, 0), 0
JK_CONFIG = "cfg-jk"
HF_MODEL = "org/tiny"
HEADS = [(layer, h) for layer in (0, 2, 4, 6, 8, 10) for h in (0, 1)]
ROTATION_METRICS = ("bias_strength", "r_k_a", "plane_var_fraction", "mu_q_a", "alpha_k")
VARS = {"n_boot": 200}

PROSE = sm.ModelSpec(
    "tiny-prose",
    "Tiny",
    8192,
    512,
    12,
    HEADS,
    ap0=0.70,
    slope=0.20,
    mu_q_a=2.0,
    alpha_k=1e-3,
    in_registry=False,
)
CODE = replace(PROSE, model_id="tiny-code", ap0=0.66, slope=0.30, mu_q_a=2.2)
WEB = replace(PROSE, model_id="tiny-web")
OTHER = replace(PROSE, model_id="other", ap0=0.5)
AGAIN = replace(PROSE, model_id="tiny-prose-again")  # the same dataset as tiny-prose
LATER = replace(PROSE, model_id="tiny-later", checkpoint_step=100)  # another checkpoint
DATASETS = {
    "tiny-prose": "prose",
    "tiny-code": "code",
    "tiny-web": "web",
    "other": None,
    "tiny-prose-again": "prose",
    "tiny-later": "later-text",
}
JACKKNIFED = {"tiny-prose": 0.010, "tiny-code": 0.015}  # model -> scale of the group effects


def _empty(key: dict, g: int) -> tuple[dict, dict]:
    bucket = dict(
        **key,
        q_bucket=-1,
        doc_group=g,
        n_queries=None,
        bucket_position=None,
        ap_bucket=None,
        ap_bucket_empirical=None,
        n_pairs=None,
        config_id=JK_CONFIG,
    )
    metric = dict(**key, doc_group=g, metric="no_rows", value=None, config_id=JK_CONFIG)
    return bucket, metric


def jackknife_rows(spec: sm.ModelSpec, scale: float) -> dict[str, list[dict]]:
    """plasticity_buckets_jackknife and head_jackknife rows: every value moved by a group effect
    (common to the heads, so the model value moves) plus a head wiggle."""
    out: dict[str, list[dict]] = {"plasticity_buckets_jackknife": [], "head_jackknife": []}
    rotation = {(r["layer"], r["q_head"]): r for r in sm.model_rows(spec)["rotation_heads"]}
    for idx, (layer, q_head) in enumerate(spec.heads):
        key = dict(model_id=spec.model_id, layer=layer, q_head=q_head, k_head=q_head // 4)
        base = sm.bucket_rows(spec, idx, layer, q_head)
        for g in range(G):
            if g == EMPTY_GROUP or ((layer, q_head) == SPARSE_HEAD and g == SPARSE_GROUP):
                b, m = _empty(key, g)
                out["plasticity_buckets_jackknife"].append(b)
                out["head_jackknife"].append(m)
                continue
            effect = scale * math.sin(1.7 * g + 0.3)
            for b in base:
                j = b["q_bucket"]
                out["plasticity_buckets_jackknife"].append(
                    dict(
                        **key,
                        q_bucket=j,
                        doc_group=g,
                        n_queries=int(b["n_queries"] * 0.8) + (g * j) % 3,
                        bucket_position=b["bucket_position"] + 3.0 * (g - 2),
                        ap_bucket=b["ap_bucket"]
                        + effect * (1 + 0.1 * j)
                        + 0.002 * math.cos(g + j + idx),
                        ap_bucket_empirical=None,
                        n_pairs=1024,
                        config_id=JK_CONFIG,
                    )
                )
            for k, name in enumerate(ROTATION_METRICS):
                full = rotation[(layer, q_head)][name]
                out["head_jackknife"].append(
                    dict(
                        **key,
                        doc_group=g,
                        metric=name,
                        value=full * (1 + effect) + 0.001 * math.cos(g + idx + k),
                        config_id=JK_CONFIG,
                    )
                )
    return out


def fill(con) -> None:
    sm.insert(con, "run_config", sm.run_config_rows())
    sm.insert(
        con,
        "run_config",
        [
            dict(
                config_id=JK_CONFIG,
                analysis="uncertainty",
                code_version="test",
                params_json=json.dumps({"document_groups": G}),
                created_at=sm.NOW,
            )
        ],
    )
    for spec in (PROSE, CODE, WEB, OTHER, AGAIN, LATER):
        tables = sm.model_rows(spec)
        tables["models"][0].update(
            hf_model=HF_MODEL if spec is not OTHER else None, dataset=DATASETS[spec.model_id]
        )
        for table, rows in tables.items():
            sm.insert(con, table, rows)
        sm.insert(con, "current_config", sm.current_config_rows(spec))
        if spec.model_id in JACKKNIFED:
            for table, rows in jackknife_rows(spec, JACKKNIFED[spec.model_id]).items():
                sm.insert(con, table, rows)
            sm.insert(
                con,
                "current_config",
                [
                    dict(
                        model_id=spec.model_id,
                        analysis="uncertainty",
                        config_id=JK_CONFIG,
                        set_at=sm.NOW,
                    )
                ],
            )


# ------------------------------------------------------------------------------------------
# expectations, from the inserted rows
# ------------------------------------------------------------------------------------------


def _jk_deciles(rows: list[dict], context_length: int) -> dict[int, float]:
    acc: dict[int, list[float]] = {}
    for b in rows:
        k = min(max(math.floor(10 * b["bucket_position"] / context_length), 0), 9)
        s = acc.setdefault(k, [0.0, 0.0])
        s[0] += b["n_queries"] * b["ap_bucket"]
        s[1] += b["n_queries"]
    return {k: s[0] / s[1] for k, s in acc.items()}


def _se(thetas: list[float]) -> float:
    t = np.asarray(thetas, dtype=np.float64)
    n = len(t)
    return float(np.sqrt((n - 1) / n * np.sum((t - t.mean()) ** 2)))


def expected_se_documents(spec: sm.ModelSpec) -> dict[str, float]:
    """se_documents of ap_overall, ap_drop and the rotation means, by the formula."""
    rows = jackknife_rows(spec, JACKKNIFED[spec.model_id])
    full_rot = {(r["layer"], r["q_head"]): r for r in sm.model_rows(spec)["rotation_heads"]}
    groups = [g for g in range(G) if g != EMPTY_GROUP]
    thetas: dict[str, list[float]] = {}
    for g in groups:
        deciles, overall = [], []
        rot: dict[str, list[float]] = {m: [] for m in ROTATION_METRICS}
        for idx, (layer, q_head) in enumerate(spec.heads):
            sparse = (layer, q_head) == SPARSE_HEAD and g == SPARSE_GROUP
            if sparse:
                base = sm.bucket_rows(spec, idx, layer, q_head)
                deciles.append(sm.head_deciles(base))
                overall.append(sm.head_ap_overall(base))
                for m in ROTATION_METRICS:
                    rot[m].append(full_rot[(layer, q_head)][m])
                continue
            mine = [
                b
                for b in rows["plasticity_buckets_jackknife"]
                if (b["layer"], b["q_head"], b["doc_group"]) == (layer, q_head, g)
            ]
            deciles.append(_jk_deciles(mine, spec.context_length))
            w = sum(b["n_queries"] for b in mine)
            overall.append(sum(b["n_queries"] * b["ap_bucket"] for b in mine) / w)
            for r in rows["head_jackknife"]:
                if (r["layer"], r["q_head"], r["doc_group"]) == (layer, q_head, g):
                    rot[r["metric"]].append(r["value"])
        model_dec = {k: float(np.mean([d[k] for d in deciles if k in d])) for k in range(10)}
        first = (model_dec[0] + model_dec[1]) / 2
        last = (model_dec[8] + model_dec[9]) / 2
        thetas.setdefault("ap_overall", []).append(float(np.mean(overall)))
        thetas.setdefault("ap_drop", []).append(first - last)
        thetas.setdefault("bias_strength", []).append(float(np.mean(rot["bias_strength"])))
        thetas.setdefault("abs_r_k_a", []).append(float(np.mean(np.abs(rot["r_k_a"]))))
        thetas.setdefault("plane_var_fraction", []).append(
            float(np.mean(rot["plane_var_fraction"]))
        )
    return {m: _se(t) for m, t in thetas.items()}
