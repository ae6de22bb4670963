"""The project's single synthetic Q/K generator (tests, ``qkwh synth``, benchmark, dbt tests).

Two layers:

* pure numpy — :func:`make_frame`, :func:`sample_positions`, :func:`sample_vectors` and
  :func:`make_head`, which returns a :class:`~qkwh.analyses.types.HeadData` plus the
  :class:`PlantedTruth` it was drawn from;
* file output — :func:`write_dataset`, which writes a whole model in the qk-sniffer layout
  (``<root>/l{LL:02d}h{HH:02d}{q|k}/data.parquet``, zstd, plus ``_saver_state.json``).

Generative model of one head (the planar rotation model of docs/metrics/rotation.md).  With an
orthonormal frame {a, b, u_1, v_1, ..., u_P, v_P} in R^d, a query at position t is

    q = (mu_q_a + alpha_q (t - t_c)) a + mu_q_b b
        + Σ_p A_p [cos(ω_p t + φ_p + ε) u_p + sin(ω_p t + φ_p + ε) v_p] + noise_sd · N(0, I_d)

and a key at position s the same with (mu_k_a, alpha_k, mu_k_b).  t_c = (L_ctx - 1)/2 is the mean
of the uniform position distribution, so mean(aᵀq) ≈ mu_q_a; alpha_* are scaled by
``drift_scale``; mu_q_b - mu_k_b = ``separation``; ε ~ N(0, rope_phase_sd²) per row.  The planes
are the "RoPE rotation planes" (shared by Q and K, so Q/K are inseparable on them).

Positions follow the qk-sniffer ``uniform`` sampler semantics
(docs/input-format.md#buckets-and-samplers): rows are distinct (example, position) cells drawn
uniformly over ``n_examples`` documents of ``context_length`` tokens, ``bucket = position //
bucket_size``, Q and K at independent positions, rows sorted by
(example_id, position) like the real files.

Caveats worth knowing when checking recovered values: the estimated drift axis is
c ∝ Cov(pooled X, τ), so (i) a Q–K mean-position difference adds (Δμ)(t̄ - s̄) to c (pass
``shared_positions=True`` to remove it) and (ii) a rotation plane slow enough to be on the ω grid
(period >= 2 buckets) has a genuine linear covariance with position (≈ -A L/(2πk) for k periods
per context), which tilts a towards that plane.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from qkwh.analyses.types import HeadData
from qkwh.sniffed.writer import data_path, write_saver_state, write_vectors_file

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

RopePlanes = Sequence[tuple[float, float]]

#: default rotation planes as (periods per context, amplitude): slow enough to sit on the
#: rotation analysis' ω grid (<= L_ctx / (2 m) periods), weak enough to tilt a by only a few degrees
DEFAULT_ROPE_PERIODS: tuple[tuple[float, float], ...] = ((4.0, 1.0), (7.0, 0.7))


# ---------------------------------------------------------------------------------------------
# planted geometry
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Frame:
    """Orthonormal planted directions of one (layer, kv-group).

    a : (d,) drift axis;  b : (d,) separation axis (⊥ a)
    planes : (P, 2, d) orthonormal bases (u_p, v_p) of the rotation planes (⊥ a, b, each other)
    phases : (P,) phase offset φ_p of each plane (radians)
    """

    a: np.ndarray
    b: np.ndarray
    planes: np.ndarray
    phases: np.ndarray

    @property
    def d(self) -> int:
        return int(self.a.shape[0])


@dataclass(frozen=True)
class PlantedTruth:
    """Parameters a synthetic head was drawn from (all effective, i.e. after ``drift_scale``).

    Units: vector units; positions in tokens; alpha in vector units per token; ω in rad/token.
    """

    a: np.ndarray
    b: np.ndarray
    planes: np.ndarray
    rope_frequencies: np.ndarray
    rope_amplitudes: np.ndarray
    alpha_q: float
    alpha_k: float
    mu_q_a: float
    mu_k_a: float
    mu_q_b: float
    mu_k_b: float
    noise_sd: float
    drift_scale: float
    context_length: int
    bucket_size: int
    position_centre: float
    layer: int = 0
    q_head: int = 0
    k_head: int = 0

    @property
    def separation(self) -> float:
        """mu_q_b - mu_k_b (Q–K centroid offset along b)."""
        return self.mu_q_b - self.mu_k_b

    @property
    def bias_strength(self) -> float:
        """mu_q_a · alpha_k, score units per token (docs/metrics/rotation.md)."""
        return self.mu_q_a * self.alpha_k

    @property
    def bias_strength_ctx(self) -> float:
        return self.bias_strength * self.context_length

    @property
    def slope_ratio_kq(self) -> float:
        return abs(self.alpha_k) / abs(self.alpha_q) if self.alpha_q != 0 else float("nan")

    @property
    def mu_q(self) -> np.ndarray:
        """(d,) expected query mean."""
        return self.mu_q_a * self.a + self.mu_q_b * self.b

    @property
    def mu_k(self) -> np.ndarray:
        return self.mu_k_a * self.a + self.mu_k_b * self.b

    @property
    def position_var(self) -> float:
        """Variance of a uniform integer position on [0, L_ctx)."""
        return (self.context_length**2 - 1) / 12.0

    @property
    def content_var_b(self) -> float:
        """Expected within-class variance along b (= noise_sd²)."""
        return self.noise_sd**2

    def expected_r_a(self, kind: str) -> float:
        """Expected Pearson(aᵀx, position) for kind 'q' or 'k' (no plane leakage)."""
        alpha = self.alpha_q if kind == "q" else self.alpha_k
        sig = alpha**2 * self.position_var
        return float(np.sign(alpha) * np.sqrt(sig / (sig + self.noise_sd**2))) if sig > 0 else 0.0

    @property
    def expected_separation_strength(self) -> float:
        """E[(bᵀδ)²]/E‖δ‖² for independent (q, k) pairs, ignoring sampling noise and leakage.

        E[δδᵀ] = Σ_Q + Σ_K + ΔμΔμᵀ; each class has trace d·noise² + alpha²·Var(τ) + Σ_p A_p².
        """
        d = self.a.shape[0]
        num = 2 * self.noise_sd**2 + self.separation**2
        tr = (
            2 * d * self.noise_sd**2
            + (self.alpha_q**2 + self.alpha_k**2) * self.position_var
            + 2 * float(np.sum(self.rope_amplitudes**2))
            + self.separation**2
            + (self.mu_q_a - self.mu_k_a) ** 2
        )
        return num / tr


def plane_frequency(periods_per_context: float, context_length: int) -> float:
    """ω (rad/token) of a plane that turns ``periods_per_context`` times over L_ctx tokens."""
    return 2.0 * np.pi * periods_per_context / context_length


def default_rope_planes(context_length: int) -> list[tuple[float, float]]:
    """:data:`DEFAULT_ROPE_PERIODS` as [(ω rad/token, amplitude), ...] for a context length."""
    return [(plane_frequency(k, context_length), amp) for k, amp in DEFAULT_ROPE_PERIODS]


def make_frame(
    rng: np.random.Generator,
    d: int,
    n_planes: int = 0,
    drift_dims: Sequence[int] | np.ndarray | None = None,
) -> Frame:
    """Random orthonormal frame: a, b and ``n_planes`` planes (needs d >= 2 + 2 n_planes).

    ``drift_dims``: head dims the drift axis a is confined to (a random unit vector of their
    span; b and the planes are then orthonormal to a over all dims).  None: a is free (the
    frame drawn without it is unchanged).
    """
    if d < 2 + 2 * n_planes:
        raise ValueError(f"d={d} too small for axes a, b and {n_planes} rotation planes")
    basis, _ = np.linalg.qr(rng.standard_normal((d, 2 + 2 * n_planes)))
    if drift_dims is not None:
        dims = np.unique(np.asarray(drift_dims, dtype=np.int64))
        if dims.size == 0 or dims[0] < 0 or dims[-1] >= d:
            raise ValueError(f"drift dims must be within 0..{d - 1}")
        a = np.zeros(d)
        a[dims] = rng.standard_normal(dims.size)
        a /= np.linalg.norm(a)
        rest = basis[:, 1:] - np.outer(a, a @ basis[:, 1:])  # the others, made orthogonal to a
        others, _ = np.linalg.qr(rest)
        basis = np.column_stack([a, others])
    planes = basis[:, 2:].T.reshape(n_planes, 2, d)
    return Frame(
        a=basis[:, 0].copy(),
        b=basis[:, 1].copy(),
        planes=planes,
        phases=rng.uniform(0, 2 * np.pi, n_planes),
    )


# ---------------------------------------------------------------------------------------------
# rows
# ---------------------------------------------------------------------------------------------
def sample_positions(
    rng: np.random.Generator, n: int, *, n_examples: int, context_length: int, bucket_size: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``n`` distinct (example, position) cells, uniform over examples x [0, L_ctx).

    Returns
    -------
    (position, example_id, bucket) : int32 arrays of length n, sorted by (example_id, position);
    bucket = position // bucket_size.
    """
    total = int(n_examples) * int(context_length)
    if n > total:
        raise ValueError(
            f"cannot draw {n} distinct rows from {n_examples} examples x {context_length} positions"
        )
    if n < 0 or n_examples < 1 or context_length < 1 or bucket_size < 1:
        raise ValueError(
            "n >= 0, n_examples >= 1, context_length >= 1 and bucket_size >= 1 are required"
        )
    codes = np.sort(rng.choice(total, size=int(n), replace=False))
    example = (codes // context_length).astype(np.int32)
    position = (codes % context_length).astype(np.int32)
    return position, example, (position // bucket_size).astype(np.int32)


def sample_vectors(
    rng: np.random.Generator,
    position: np.ndarray,
    *,
    frame: Frame,
    mu_a: float,
    mu_b: float,
    alpha: float,
    position_centre: float,
    rope_frequencies: np.ndarray,
    rope_amplitudes: np.ndarray,
    rope_phase_sd: float,
    noise_sd: float,
    dtype: np.dtype | type = np.float32,
    example_id: np.ndarray | None = None,
    doc_factors: np.ndarray | None = None,
) -> np.ndarray:
    """Vectors of one kind at the given positions (the generative model in the module docstring).

    ``doc_factors`` (with ``example_id``, one per row): the a-coefficient
    ``mu_a + alpha (t - t_c)`` of a row of example e is multiplied by ``doc_factors[e]``
    (:func:`doc_factors`; None: documents identical in distribution).

    Returns
    -------
    (n, d) array of ``dtype``.
    """
    pos = np.asarray(position, dtype=np.float64)
    n, n_planes = pos.size, len(rope_frequencies)
    out = rng.standard_normal((n, frame.d))
    out *= noise_sd
    # structured part as one (n, m) @ (m, d) product: coefficients on [a, b, u_1, v_1, ...]
    coef = np.empty((n, 2 + 2 * n_planes))
    coef[:, 0] = mu_a + alpha * (pos - position_centre)
    if doc_factors is not None:
        if example_id is None:
            raise ValueError("doc_factors needs the rows' example_id")
        coef[:, 0] *= np.asarray(doc_factors, dtype=np.float64)[np.asarray(example_id)]
    coef[:, 1] = mu_b
    for p in range(n_planes):  # few planes; each O(n)
        phase = rope_frequencies[p] * pos + frame.phases[p]
        if rope_phase_sd > 0:
            phase += rope_phase_sd * rng.standard_normal(n)
        coef[:, 2 + 2 * p] = rope_amplitudes[p] * np.cos(phase)
        coef[:, 3 + 2 * p] = rope_amplitudes[p] * np.sin(phase)
    dirs = np.vstack([frame.a, frame.b, frame.planes[:n_planes].reshape(2 * n_planes, frame.d)])
    out += coef @ dirs
    return out.astype(dtype, copy=False)


def doc_factors(n_examples: int, spread: float, rng: np.random.Generator) -> np.ndarray | None:
    """Per-document factors ``exp(spread · z_e)``, z_e ~ N(0, 1), of the planted drift and bias
    along a (None when ``spread`` is 0: documents identical in distribution, nothing drawn)."""
    if spread < 0:
        raise ValueError(f"doc_spread must be >= 0; got {spread}")
    if spread == 0:
        return None
    return np.exp(float(spread) * rng.standard_normal(int(n_examples)))


def _split_planes(
    rope_planes: RopePlanes | None, context_length: int
) -> tuple[np.ndarray, np.ndarray]:
    planes = default_rope_planes(context_length) if rope_planes is None else list(rope_planes)
    freqs = np.array([float(f) for f, _ in planes], dtype=np.float64)
    amps = np.array([float(a) for _, a in planes], dtype=np.float64)
    return freqs, amps


def make_head(
    rng: np.random.Generator,
    *,
    n_q: int = 4000,
    n_k: int = 4000,
    d: int = 64,
    n_examples: int = 16,
    context_length: int = 8192,
    bucket_size: int = 512,
    alpha_q: float = 5e-4,
    alpha_k: float = 1e-3,
    mu_q_a: float = 4.0,
    mu_k_a: float = 1.0,
    separation: float = 6.0,
    mu_b: float = 0.0,
    rope_planes: RopePlanes | None = None,
    rope_phase_sd: float = 0.3,
    noise_sd: float = 1.0,
    drift_scale: float = 1.0,
    doc_spread: float = 0.0,
    doc_seed: int = 0,
    shared_positions: bool = False,
    frame: Frame | None = None,
    layer: int = 0,
    q_head: int = 0,
    k_head: int = 0,
    dtype: np.dtype | type = np.float32,
) -> tuple[HeadData, PlantedTruth]:
    """Draw one synthetic head and return it with its planted truth.

    Parameters
    ----------
    rng : the only source of randomness (same generator state -> identical head)
    n_q, n_k : rows per kind;  d : head dimension
    n_examples, context_length (L_ctx, tokens), bucket_size (m, tokens) : sampler layout
    alpha_q, alpha_k : drift slopes along a (vector units per token), multiplied by drift_scale
    mu_q_a, mu_k_a : class means along a (mean of aᵀq / aᵀk)
    separation : mu_q_b - mu_k_b; the b means are mu_b ± separation/2
    rope_planes : [(ω rad/token, amplitude), ...] rotation planes shared by Q and K
        (see :func:`plane_frequency`); None = :func:`default_rope_planes` (4 and 7 periods per
        context), ``()`` = no planes (cleanest planted geometry)
    rope_phase_sd : per-row phase jitter of the planes (radians)
    noise_sd : isotropic Gaussian content noise (vector units)
    drift_scale : multiplies both alphas (positional strength knob)
    doc_spread : documents differ in planted geometry: the a-coefficient (bias mu_*_a and drift)
        of every row of example e is multiplied by exp(doc_spread · z_e), z_e ~ N(0, 1) drawn
        from ``default_rng`` of (doc_seed, its tag), not from ``rng`` (0: identical documents;
        the head is then the same as without the knob)
    shared_positions : K rows at exactly the Q positions/examples (needs n_q == n_k); removes the
        Q–K position-mean leak into the drift axis
    frame : planted directions (default: a fresh random :func:`make_frame`)
    layer, q_head, k_head : copied into HeadData / PlantedTruth
    dtype : dtype of the returned vectors (float32 like the real files)
    """
    freqs, amps = _split_planes(rope_planes, context_length)
    if frame is None:
        frame = make_frame(rng, d, len(freqs))
    elif frame.d != d or frame.planes.shape[0] < len(freqs):
        raise ValueError("frame does not match d / number of rope planes")
    if shared_positions and n_q != n_k:
        raise ValueError("shared_positions=True needs n_q == n_k")
    centre = (context_length - 1) / 2.0
    layout = dict(n_examples=n_examples, context_length=context_length, bucket_size=bucket_size)
    t, te, tb = sample_positions(rng, n_q, **layout)
    if shared_positions:
        s, se, sb = t.copy(), te.copy(), tb.copy()
    else:
        s, se, sb = sample_positions(rng, n_k, **layout)
    common: dict[str, Any] = dict(
        frame=frame,
        position_centre=centre,
        rope_frequencies=freqs,
        rope_amplitudes=amps,
        rope_phase_sd=rope_phase_sd,
        noise_sd=noise_sd,
        dtype=dtype,
    )
    mu_q_b, mu_k_b = mu_b + separation / 2.0, mu_b - separation / 2.0
    aq, ak = alpha_q * drift_scale, alpha_k * drift_scale
    factors = doc_factors(n_examples, doc_spread, _rng(doc_seed, "docs"))
    q = sample_vectors(
        rng, t, mu_a=mu_q_a, mu_b=mu_q_b, alpha=aq, example_id=te, doc_factors=factors, **common
    )
    k = sample_vectors(
        rng, s, mu_a=mu_k_a, mu_b=mu_k_b, alpha=ak, example_id=se, doc_factors=factors, **common
    )
    head = HeadData(
        q=q,
        q_pos=t,
        q_example=te,
        q_bucket=tb,
        k=k,
        k_pos=s,
        k_example=se,
        k_bucket=sb,
        context_length=int(context_length),
        bucket_size=int(bucket_size),
        sliding_window=None,
        layer=int(layer),
        q_head=int(q_head),
    )
    truth = PlantedTruth(
        a=frame.a,
        b=frame.b,
        planes=frame.planes[: len(freqs)],
        rope_frequencies=freqs,
        rope_amplitudes=amps,
        alpha_q=aq,
        alpha_k=ak,
        mu_q_a=float(mu_q_a),
        mu_k_a=float(mu_k_a),
        mu_q_b=mu_q_b,
        mu_k_b=mu_k_b,
        noise_sd=float(noise_sd),
        drift_scale=float(drift_scale),
        context_length=int(context_length),
        bucket_size=int(bucket_size),
        position_centre=centre,
        layer=int(layer),
        q_head=int(q_head),
        k_head=int(k_head),
    )
    return head, truth


# ---------------------------------------------------------------------------------------------
# dataset writer
# ---------------------------------------------------------------------------------------------
_KIND_TAG = {
    "frame": 0,
    "k": 1,
    "q": 2,
    "kpos": 3,
    "qpos": 4,
    "kparams": 5,
    "qparams": 6,
    "docs": 7,
}


def _rng(seed: int, tag: str, *ids: int) -> np.random.Generator:
    return np.random.default_rng([int(seed), _KIND_TAG[tag], *[int(i) for i in ids]])


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
