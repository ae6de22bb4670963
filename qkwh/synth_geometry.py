"""The planted geometry of the synthetic Q/K generator (:mod:`qkwh.synth`): pure numpy.

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

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from qkwh.analyses.types import HeadData

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
