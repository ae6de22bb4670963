"""The project's single synthetic Q/K generator (tests, ``qkwh synth``, benchmark, dbt tests).

Two layers:

* pure numpy (:mod:`qkwh.synth_geometry`, re-exported here) — :func:`make_frame`,
  :func:`sample_positions`, :func:`sample_vectors` and :func:`make_head`, which returns a
  :class:`~qkwh.analyses.types.HeadData` plus the :class:`PlantedTruth` it was drawn from;
* file output — :func:`write_dataset`, which writes a whole model in the qk-sniffer layout
  (``<root>/l{LL:02d}h{HH:02d}{q|k}/data.parquet``, zstd, plus ``_saver_state.json``).

The generative model and the position sampler are documented in :mod:`qkwh.synth_geometry`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from qkwh.sniffed.writer import data_path, write_saver_state, write_vectors_file
from qkwh.synth_geometry import (
    DEFAULT_ROPE_PERIODS,
    Frame,
    PlantedTruth,
    _rng,
    _split_planes,
    default_rope_planes,
    doc_factors,
    make_frame,
    make_head,
    plane_frequency,
    sample_positions,
    sample_vectors,
)

__all__ = [
    "Frame",
    "PlantedTruth",
    "make_frame",
    "sample_positions",
    "sample_vectors",
    "make_head",
    "plane_frequency",
    "default_rope_planes",
    "write_dataset",
    "DEFAULT_ROPE_PERIODS",
]


# ---------------------------------------------------------------------------------------------
# dataset writer
# ---------------------------------------------------------------------------------------------
def _jitter(rng: np.random.Generator, value: float, rel: float) -> float:
    return float(value * (1.0 + rel * rng.standard_normal())) if rel > 0 else float(value)


#: The numeric knobs of the planted geometry that ``qkwh synth --set NAME=VALUE`` sets, with what
#: each plants; their defaults are :func:`make_head`'s (and :func:`write_dataset`'s for the last
#: two).  ``qkwh synth --help`` and docs/synth.md are generated from this table.
#: layers of a synthetic model by default: more than the dbt project's ``min_layers`` (5), the
#: fewest layers the layer bootstrap draws intervals for, so that a default model gets intervals
#: and ``qkwh compare`` can tell two of them apart
DEFAULT_LAYERS = 6

SYNTH_KNOBS: dict[str, str] = {
    "alpha_q": "drift slope of the queries along the planted axis a (vector units per token)",
    "alpha_k": "drift slope of the keys along a (vector units per token)",
    "drift_scale": "multiplies both drift slopes (the strength of the positional signal)",
    "mu_q_a": "class mean of the queries along a (mean of a·q)",
    "mu_k_a": "class mean of the keys along a (mean of a·k)",
    "separation": "distance between the query and key means along the planted axis b",
    "mu_b": "centre of the query and key means along b (they sit at mu_b ± separation/2)",
    "rope_phase_sd": "per-row phase jitter of the RoPE-like rotation planes (radians)",
    "noise_sd": "s.d. of the isotropic Gaussian content noise (vector units)",
    "param_jitter": "relative s.d. of a per-head multiplicative jitter of the slopes, means and separation",
    "layer_drift_decay": "drift_scale of layer l is multiplied by exp(-layer_drift_decay · l / layers)",
    "drift_plane_first": "first RoPE plane (layout half: dims i and i + d/2) the drift axis a is "
    "confined to; -1: a spans every dim",
    "drift_plane_last": "last such plane (-1: the last plane); with rope_theta 10000 recorded, "
    "d = 64, m = 512 and L_ctx = 8192, planes 0-15 are high, 16-24 mid, 25-31 low",
    "doc_spread": "documents differ: each example's bias and drift along a are scaled by exp(doc_spread · z), z ~ N(0, 1) per example (0: identical documents)",
}


def knob_defaults() -> dict[str, float]:
    """``knob -> default`` of every :data:`SYNTH_KNOBS` entry, read from the generator's signatures."""
    defaults = {**(write_dataset.__kwdefaults__ or {}), **(make_head.__kwdefaults__ or {})}
    return {name: defaults[name] for name in SYNTH_KNOBS}


def knobs_markdown() -> str:
    """The knob table of docs/synth.md (generated; tests/test_synth_knobs.py checks the page)."""
    lines = ["| knob | default | what it plants |", "|---|---|---|"]
    lines += [f"| `{k}` | `{v:g}` | {SYNTH_KNOBS[k]} |" for k, v in knob_defaults().items()]
    return "\n".join(lines) + "\n"


def _drift_dims(first: float, last: float, d: int) -> np.ndarray | None:
    """Head dims of the RoPE planes first..last (layout half over d dims), None for -1 and -1."""
    if first == -1 and last == -1:
        return None
    n_planes = d // 2
    lo = 0 if first == -1 else first
    hi = n_planes - 1 if last == -1 else last
    if lo != int(lo) or hi != int(hi) or not 0 <= lo <= hi < n_planes:
        raise ValueError(
            f"drift_plane_first={first:g}, drift_plane_last={last:g}: need whole plane numbers "
            f"0 <= first <= last <= {n_planes - 1} (d = {d} has {n_planes} planes), or -1"
        )
    planes = np.arange(int(lo), int(hi) + 1)
    return np.concatenate([planes, planes + n_planes])


def write_dataset(
    root: Path | str,
    *,
    model_name: str = "synthetic/qkwh-synth",
    n_layers: int = DEFAULT_LAYERS,
    n_q_heads: int = 8,
    n_kv_heads: int = 2,
    heads: Iterable[tuple[int, int]] | None = None,
    d: int = 64,
    rows_per_file: int = 2000,
    n_examples: int = 16,
    context_length: int = 8192,
    bucket_size: int = 512,
    seed: int = 0,
    param_jitter: float = 0.0,
    layer_drift_decay: float = 0.0,
    drift_plane_first: int = -1,
    drift_plane_last: int = -1,
    **planted_kwargs: Any,
) -> Path:
    """Write a synthetic model in the qk-sniffer layout and return ``root``.

    Files: ``<root>/l{LL:02d}h{HH:02d}q/data.parquet`` for every selected (layer, q_head) and
    ``<root>/l{LL:02d}h{KK:02d}k/data.parquet`` for its GQA key head ``KK = q_head // (n_q/n_kv)``
    (one k file shared by the query heads of its group), zstd parquet with columns bucket int32,
    example_id int32, position int32, vector fixed_size_list<float32>[d], sliding_window int32
    (all null), rows sorted by (example_id, position).  Plus ``_saver_state.json`` (model_name,
    model_metadata like the real saver's, bucket_counts summed over all files) and
    ``_synth_truth.json`` (per query head: the planted scalars of :class:`PlantedTruth`).

    Deterministic from ``seed``: positions are drawn per (layer, kind) and shared by all heads of
    that layer and kind (like the real sampler's masks); the frame (a, b, planes) and the K rows
    per (layer, k_head); the Q rows per (layer, q_head).

    Parameters
    ----------
    heads : (layer, q_head) pairs to write; default every head of every layer
    rows_per_file : rows of every q and k file
    param_jitter : relative s.d. of per-head multiplicative jitter on alpha_*, mu_*_a, separation
        (K-side parameters jitter per kv group, Q-side per query head)
    layer_drift_decay : drift_scale of layer ℓ is multiplied by exp(-layer_drift_decay · ℓ / n_layers)
    drift_plane_first, drift_plane_last : confine the drift axis a to the RoPE planes first..last
        (layout half, the frequencies of the recorded ``rope_theta`` over all d dims: plane i is
        dims i and i + d/2), so that the position drift sits in one frequency band; -1 and -1:
        a spans every dim (default); -1 as last: up to the last plane
    planted_kwargs : any other :func:`make_head` parameter (alpha_q, alpha_k, mu_q_a, mu_k_a,
        separation, mu_b, rope_planes, rope_phase_sd, noise_sd, drift_scale, doc_spread); with
        doc_spread the per-example factors are drawn once per model (every head, Q and K alike)
    """
    allowed = {
        "alpha_q",
        "alpha_k",
        "mu_q_a",
        "mu_k_a",
        "separation",
        "mu_b",
        "rope_planes",
        "rope_phase_sd",
        "noise_sd",
        "drift_scale",
        "doc_spread",
    }
    unknown = set(planted_kwargs) - allowed
    if unknown:
        raise ValueError(f"unknown planted parameter(s): {', '.join(sorted(unknown))}")
    if n_kv_heads < 1 or n_q_heads % n_kv_heads:
        raise ValueError(
            f"n_q_heads={n_q_heads} must be a positive multiple of n_kv_heads={n_kv_heads}"
        )
    ratio = n_q_heads // n_kv_heads
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    if heads is None:
        selected = [(layer, h) for layer in range(n_layers) for h in range(n_q_heads)]
    else:
        selected = sorted({(int(layer), int(h)) for layer, h in heads})
    for layer, h in selected:
        if not (0 <= layer < n_layers and 0 <= h < n_q_heads):
            raise ValueError(
                f"head (layer={layer}, q_head={h}) outside {n_layers} layers x {n_q_heads} heads"
            )

    defaults = {name: make_head.__kwdefaults__[name] for name in allowed}  # type: ignore[index]
    p = {**defaults, **planted_kwargs}
    freqs, amps = _split_planes(p["rope_planes"], context_length)
    drift_dims = _drift_dims(drift_plane_first, drift_plane_last, d)
    centre = (context_length - 1) / 2.0
    layout = dict(n_examples=n_examples, context_length=context_length, bucket_size=bucket_size)
    common = dict(
        position_centre=centre,
        rope_frequencies=freqs,
        rope_amplitudes=amps,
        rope_phase_sd=p["rope_phase_sd"],
        noise_sd=p["noise_sd"],
    )
    factors = doc_factors(n_examples, p["doc_spread"], _rng(seed, "docs"))
    bucket_counts: dict[int, int] = {}
    truth_rows: list[dict[str, Any]] = []

    def count(bucket: np.ndarray) -> None:
        ids, cnt = np.unique(bucket, return_counts=True)
        for i, c in zip(ids.tolist(), cnt.tolist()):
            bucket_counts[i] = bucket_counts.get(i, 0) + c

    for layer in sorted({layer for layer, _ in selected}):
        q_heads = [h for lay, h in selected if lay == layer]
        scale = p["drift_scale"] * float(np.exp(-layer_drift_decay * layer / max(n_layers, 1)))
        qpos = sample_positions(_rng(seed, "qpos", layer), rows_per_file, **layout)
        kpos = sample_positions(_rng(seed, "kpos", layer), rows_per_file, **layout)
        for kh in sorted({h // ratio for h in q_heads}):
            frame = make_frame(_rng(seed, "frame", layer, kh), d, len(freqs), drift_dims)
            kr = _rng(seed, "kparams", layer, kh)
            sep_k = _jitter(kr, p["separation"], param_jitter)
            k_par = dict(
                mu_a=_jitter(kr, p["mu_k_a"], param_jitter),
                mu_b=p["mu_b"] - sep_k / 2.0,
                alpha=_jitter(kr, p["alpha_k"], param_jitter) * scale,
            )
            k_vec = sample_vectors(
                _rng(seed, "k", layer, kh),
                kpos[0],
                frame=frame,
                example_id=kpos[1],
                doc_factors=factors,
                **k_par,
                **common,
            )
            write_vectors_file(
                data_path(root, layer, kh, "k"),
                position=kpos[0],
                example_id=kpos[1],
                bucket=kpos[2],
                vectors=k_vec,
            )
            count(kpos[2])
            for h in (h for h in q_heads if h // ratio == kh):
                qr = _rng(seed, "qparams", layer, h)
                sep_q = _jitter(qr, p["separation"], param_jitter)
                q_par = dict(
                    mu_a=_jitter(qr, p["mu_q_a"], param_jitter),
                    mu_b=p["mu_b"] + sep_q / 2.0,
                    alpha=_jitter(qr, p["alpha_q"], param_jitter) * scale,
                )
                q_vec = sample_vectors(
                    _rng(seed, "q", layer, h),
                    qpos[0],
                    frame=frame,
                    example_id=qpos[1],
                    doc_factors=factors,
                    **q_par,
                    **common,
                )
                write_vectors_file(
                    data_path(root, layer, h, "q"),
                    position=qpos[0],
                    example_id=qpos[1],
                    bucket=qpos[2],
                    vectors=q_vec,
                )
                count(qpos[2])
                truth_rows.append(
                    {
                        "layer": layer,
                        "q_head": h,
                        "k_head": kh,
                        "alpha_q": q_par["alpha"],
                        "alpha_k": k_par["alpha"],
                        "mu_q_a": q_par["mu_a"],
                        "mu_k_a": k_par["mu_a"],
                        "mu_q_b": q_par["mu_b"],
                        "mu_k_b": k_par["mu_b"],
                        "bias_strength": q_par["mu_a"] * k_par["alpha"],
                        "drift_scale": scale,
                        "noise_sd": p["noise_sd"],
                        "rope_frequencies": freqs.tolist(),
                        "rope_amplitudes": amps.tolist(),
                        **({} if drift_dims is None else {"drift_dims": drift_dims.tolist()}),
                    }
                )

    n_kv_selected = len({(layer, h // ratio) for layer, h in selected})
    metadata = {
        "attention_scope": "all_attention",
        "capture_pre_rope": 0,
        "capture_token_strings": 0,
        "capture_tool": "qkwh.synth",
        "dataset_branch": model_name.split("/")[-1],
        "dataset_name": "",
        "dataset_repo": "",
        "dataset_split": "synthetic",
        "head_dim": int(d),
        "head_sampling_full_attention_only": 1,
        "head_sampling_full_layer_count": int(n_layers),
        "head_sampling_num_key_heads": int(n_kv_heads),
        "head_sampling_num_layers": int(n_layers),
        "head_sampling_num_query_heads": int(n_q_heads),
        "head_sampling_requested_query_heads": len(selected),
        "head_sampling_seed": int(seed),
        "head_sampling_selected_key_heads": n_kv_selected,
        "head_sampling_selected_query_heads": len(selected),
        "head_sampling_sliding_candidates_excluded": 0,
        "head_sampling_sliding_layer_count": 0,
        "head_sampling_strategy": "random_query",
        "max_position_embeddings": int(context_length),
        "model_dtype": "float32",
        "num_attention_heads": int(n_q_heads),
        "num_examples": int(n_examples),
        "num_hidden_layers": int(n_layers),
        "num_key_value_heads": int(n_kv_heads),
        "rope_theta": 10000.0,
        "rope_type": "default",
        "sampling_base_rate": 1.0,
        "sampling_bucket_size": int(bucket_size),
        "sampling_keep_probability": rows_per_file / float(n_examples * context_length),
        "sampling_strategy": "uniform",
        "source_dataset": "qkwh.synth",
        "synthetic": 1,
        "tokenizer_max_length": int(context_length),
        "total_tokens": int(n_examples * context_length),
    }
    write_saver_state(root, model_name=model_name, metadata=metadata, bucket_counts=bucket_counts)
    truth: dict[str, Any] = {"seed": int(seed), "param_jitter": param_jitter}
    if factors is not None:  # per-document factors (absent when documents are identical)
        truth.update(doc_spread=p["doc_spread"], doc_factors=factors.tolist())
    (root / "_synth_truth.json").write_text(
        json.dumps({**truth, "heads": truth_rows}, indent=2) + "\n"
    )
    return root
