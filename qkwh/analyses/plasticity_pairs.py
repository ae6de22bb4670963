"""Admissible key pairs of the plasticity analysis and the bucket estimators over them.

Pair counting, uniform sampling and enumeration; the sampled and exhaustive estimators of a
bucket's AP (closed form), with the heatmap accumulators; the empirical (real-query) estimator on
the same pairs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy.linalg import blas as _blas

from qkwh.analyses.plasticity_model import QueryModel, _pp_from_mv, pair_plasticity

__all__ = [
    "BucketEstimate",
    "EmpiricalEstimate",
    "HeatmapAccumulator",
    "admissible_pair_counts",
    "empirical_pair_plasticity",
    "enumerate_pairs",
    "exhaustive_bucket",
    "net_wins",
    "sample_pairs",
    "sampled_bucket",
]

GRAM_BLOCK = 1 << 20  # max float64 entries of one batched Gram block in exhaustive mode
HEAT_DENSE_MAX = 1 << 18  # larger (dx_bin, dm_bin) grids are accumulated sparsely


# ---------------------------------------------------------------------------------------------
# admissible pairs, sampling and enumeration (docs/metrics/plasticity.md#step-5-admissible-key-pairs)
# ---------------------------------------------------------------------------------------------
def admissible_pair_counts(counts: np.ndarray) -> np.ndarray:
    """``A_e = G_e (G_e - 1) / 2`` for eligible-key counts ``G_e`` (int64 array)."""
    g = np.asarray(counts, dtype=np.int64)
    return g * (g - 1) // 2


def sample_pairs(
    rng: np.random.Generator, counts: np.ndarray, n_pairs: int
) -> tuple[np.ndarray, np.ndarray]:
    """Draw ``n_pairs`` admissible pairs i.i.d. and uniformly over all admissible pairs.

    counts : (E,) eligible keys per example (``G_e``); the eligible keys are laid out example
    by example (example e occupies ``[start_e, start_e + G_e)``, ``start = cumsum(G) - G``).
    Returns ``(i1, i2)`` (int64, (n_pairs,)) into that layout, ``i1 != i2``, same example.

    RNG consumption (exactly three calls): ``r = integers(0, A, n)`` picks pair slots, whose
    example ``e`` is ``searchsorted(cumsum(A_e), r, 'right')`` (probability ``A_e / A``); then
    ``a = integers(0, G_e)`` and ``b = integers(0, G_e - 1)``, ``b += (b >= a)`` -- two distinct
    keys of ``e`` uniformly without replacement.  Needs ``A > 0``.
    """
    g = np.asarray(counts, dtype=np.int64)
    cum_a = np.cumsum(admissible_pair_counts(g))
    total = int(cum_a[-1]) if len(cum_a) else 0
    if total <= 0:
        raise ValueError("sample_pairs needs at least one admissible pair")
    r = rng.integers(0, total, size=int(n_pairs), dtype=np.int64)
    e = np.searchsorted(cum_a, r, side="right")
    ge = g[e]
    a = rng.integers(0, ge, dtype=np.int64)
    b = rng.integers(0, ge - 1, dtype=np.int64)
    b += b >= a
    start = (np.cumsum(g) - g)[e]
    return start + a, start + b


def enumerate_pairs(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every admissible pair once, as ``(i1, i2)`` with ``i1 < i2`` (layout of :func:`sample_pairs`).

    Order: example by example, then ``i1``, then ``i2`` (fully vectorised).  Memory O(A).
    """
    g = np.asarray(counts, dtype=np.int64)
    n = int(g.sum())
    start = np.cumsum(g) - g
    owner = np.repeat(np.arange(len(g)), g)
    local = np.arange(n) - start[owner]
    partners = g[owner] - 1 - local  # keys after i in its example
    i1 = np.repeat(np.arange(n), partners)
    first = np.cumsum(partners) - partners
    i2 = i1 + 1 + (np.arange(len(i1)) - np.repeat(first, partners))
    return i1, i2


# ---------------------------------------------------------------------------------------------
# Bucket estimates and heatmap accumulators
# ---------------------------------------------------------------------------------------------
@dataclass
class HeatmapAccumulator:
    """Accumulators ``n, sum_pp, sum_pp2`` over ``(dx_bin, dm_bin)`` for one q-bucket.

    dx_bin = floor(|s1 - s2| / W), dm_bin = floor((tau - (s1 + s2)/2) / W).  The grid bounds come
    from the eligible key positions ``[s_min, s_max]``, so every pair falls inside.  Dense
    ``bincount`` accumulation; when the grid would exceed ``dense_max`` cells (W tiny
    relative to the key span) the non-empty cells are merged sparsely instead.
    """

    tau: float
    width: float
    s_min: float
    s_max: float
    dense_max: int = HEAT_DENSE_MAX
    n_dx: int = field(init=False)
    dm_lo: int = field(init=False)
    n_dm: int = field(init=False)
    cells: np.ndarray | None = field(init=False)  # sparse mode: sorted occupied cell codes
    n: np.ndarray = field(init=False)
    sum_pp: np.ndarray = field(init=False)
    sum_pp2: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.n_dx = int(math.floor((self.s_max - self.s_min) / self.width)) + 1
        self.dm_lo = int(math.floor((self.tau - self.s_max) / self.width))
        self.n_dm = int(math.floor((self.tau - self.s_min) / self.width)) - self.dm_lo + 1
        size = self.n_dx * self.n_dm
        dense = size <= self.dense_max
        self.cells = None if dense else np.zeros(0, dtype=np.int64)
        size = size if dense else 0
        self.n = np.zeros(size, dtype=np.int64)
        self.sum_pp = np.zeros(size)
        self.sum_pp2 = np.zeros(size)

    def add(self, s1: np.ndarray, s2: np.ndarray, pp: np.ndarray) -> None:
        """Accumulate pairs with key positions ``s1, s2`` (float64) and plasticities ``pp``."""
        # dx = floor(|s1 - s2| / W): the quotient is >= 0, so truncating it to an integer floors it
        scratch = np.subtract(s1, s2)
        np.abs(scratch, out=scratch)
        scratch /= self.width
        cell = scratch.astype(np.int64)
        cell *= self.n_dm
        # dm = floor((tau - (s1 + s2) / 2) / W) - dm_lo, with the same operations in one scratch array
        np.add(s1, s2, out=scratch)
        scratch *= 0.5
        np.subtract(self.tau, scratch, out=scratch)
        scratch /= self.width
        np.floor(scratch, out=scratch)
        cell += scratch.astype(np.int64)
        cell -= self.dm_lo
        if self.cells is None:
            size = self.n.size
            self.n += np.bincount(cell, minlength=size)
            self.sum_pp += np.bincount(cell, weights=pp, minlength=size)
            self.sum_pp2 += np.bincount(cell, weights=pp * pp, minlength=size)
            return
        codes, inv = np.unique(np.concatenate([self.cells, cell]), return_inverse=True)
        ones = np.concatenate([self.n, np.ones(len(cell), dtype=np.int64)])
        self.n = np.bincount(inv, weights=ones, minlength=len(codes)).astype(np.int64)
        self.sum_pp = np.bincount(
            inv, weights=np.concatenate([self.sum_pp, pp]), minlength=len(codes)
        )
        self.sum_pp2 = np.bincount(
            inv, weights=np.concatenate([self.sum_pp2, pp * pp]), minlength=len(codes)
        )
        self.cells = codes

    def rows(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Non-empty cells as ``(dx_bin, dm_bin, n, sum_pp, sum_pp2)``, ordered by (dx, dm)."""
        if self.cells is None:
            nz = np.flatnonzero(self.n)
            codes = nz
        else:
            nz = np.arange(len(self.cells))
            codes = self.cells
        return (
            codes // self.n_dm,
            codes % self.n_dm + self.dm_lo,
            self.n[nz],
            self.sum_pp[nz],
            self.sum_pp2[nz],
        )


@dataclass
class BucketEstimate:
    """Plasticity estimate of one q-bucket.

    n_pairs : pairs evaluated (P when sampling, A when every pair is used);
    ap : mean PP; se : standard error of the *sampled* estimator (see :func:`exhaustive_bucket`);
    mean_abs_z : mean |z|; exact : True when every admissible pair was used once;
    heat : the bucket's heatmap accumulator.
    """

    n_pairs: int
    ap: float
    se: float
    mean_abs_z: float
    exact: bool
    heat: HeatmapAccumulator | None
    empirical: EmpiricalEstimate | None = None


# ---------------------------------------------------------------------------------------------
# empirical (real-query) estimator
# (docs/metrics/plasticity.md#the-empirical-estimator-real-queries-no-gaussian)
# ---------------------------------------------------------------------------------------------
_EMP_CHUNK = 1 << 21  # max score differences held at once (pairs x queries)


def net_wins(diff: np.ndarray) -> np.ndarray:
    """Row-wise ``#(diff > 0) - #(diff < 0)`` of a (P, n) matrix of score differences -> (P,).

    ``diff[i, r] = q_r . k1_i - q_r . k2_i``; a tie (exactly 0) counts for neither side, i.e. 1/2
    to each in the share below.
    """
    return (np.count_nonzero(diff > 0, axis=1) - np.count_nonzero(diff < 0, axis=1)).astype(
        np.float64
    )


def empirical_pair_plasticity(wins: np.ndarray, n_queries: int) -> np.ndarray:
    """``PP_emp = 4 p (1 - p) n / (n - 1)`` per pair (empirical estimator) from net wins (P,) -> (P,).

    ``p = share of the n real queries with q.k1 > q.k2`` (ties 1/2) ``= 1/2 + wins / (2n)``, so
    ``4 p (1 - p) = 1 - (wins / n)²``.  The factor ``n / (n - 1)`` makes it unbiased for
    ``4 p (1 - p)`` of the query population (it can exceed 1 slightly).  Needs ``n >= 2``.
    """
    n = float(n_queries)
    x = np.asarray(wins, dtype=np.float64) / n
    return (1.0 - x * x) * (n / (n - 1.0))


@dataclass
class EmpiricalEstimate:
    """Empirical AP_j over a pair set, paired with the Gaussian estimate on the same pairs.

    ap : mean PP_emp; se : its standard error (same rule as the Gaussian ``se``); gap_se :
    standard error of the paired difference ``mean(PP_gauss - PP_emp)``.
    """

    ap: float
    se: float
    gap_se: float


class _EmpiricalSums:
    """Running sums of PP_emp and of the paired gap ``PP_gauss - PP_emp`` over pairs."""

    def __init__(self) -> None:
        self.n = 0
        self.s_e = self.s_e2 = self.s_g = self.s_g2 = 0.0

    def add(self, pp_gauss: np.ndarray, pp_emp: np.ndarray) -> None:
        gap = pp_gauss - pp_emp
        self.n += len(pp_emp)
        self.s_e += float(pp_emp.sum())
        self.s_e2 += float(pp_emp @ pp_emp)
        self.s_g += float(gap.sum())
        self.s_g2 += float(gap @ gap)

    def exhaustive(self, num_pairs: int) -> EmpiricalEstimate:
        """Means over every admissible pair; SE of the sampled estimator with ``num_pairs``
        draws (population sd / sqrt(P)), 0 when every pair fits in one draw set."""
        n = self.n
        ap = self.s_e / n

        def se(s: float, s2: float) -> float:
            if n <= num_pairs:
                return 0.0
            m = s / n
            return math.sqrt(max(s2 / n - m * m, 0.0) / num_pairs)

        return EmpiricalEstimate(ap, se(self.s_e, self.s_e2), se(self.s_g, self.s_g2))


def _sample_se(x: np.ndarray) -> float:
    return float(x.std(ddof=1)) / math.sqrt(len(x)) if len(x) > 1 else math.nan


def _size_grouped_layout(counts: np.ndarray) -> tuple[np.ndarray, list[tuple[int, int, int]]]:
    """Permutation of the example-by-example layout that groups examples of equal size.

    Returns ``(perm, groups)``: ``perm`` (sum of G_e over examples with G_e >= 2,) indexes the
    layout; after applying it, the examples of size ``g`` occupy one contiguous run, so a run is
    a ``(n_g, g, d)`` view.  ``groups`` lists ``(offset, n_g, g)`` in increasing g.
    """
    g = np.asarray(counts, dtype=np.int64)
    start = np.cumsum(g) - g
    ex = np.flatnonzero(g >= 2)
    ex = ex[np.argsort(g[ex], kind="stable")]
    sizes = g[ex]
    n = int(sizes.sum())
    first = np.cumsum(sizes) - sizes
    perm = np.repeat(start[ex] - first, sizes) + np.arange(n)
    groups: list[tuple[int, int, int]] = []
    off = 0
    for size, n_g in zip(*np.unique(sizes, return_counts=True)):
        groups.append((off, int(n_g), int(size)))
        off += int(n_g) * int(size)
    return perm, groups


def _pair_blocks(groups: list[tuple[int, int, int]], gram_block: int = GRAM_BLOCK):
    """Yield ``(offset, n_b, g, r0, r1, aa, bb)``: blocks covering every admissible pair once.

    A block is ``n_b`` consecutive examples of size ``g`` starting at ``offset`` of the grouped
    layout, restricted to rows ``[r0, r1)``; its pairs are (row ``r0 + aa``, column ``bb``) of
    each example with ``r0 + aa < bb``.  A block holds at most ~``gram_block`` Gram entries /
    key coordinates (huge examples are split into row ranges).
    """
    for off, n_g, size in groups:
        per_ex = size * max(size, 128)
        if per_ex <= gram_block:
            chunk, row_step = max(1, gram_block // per_ex), size
        else:
            chunk, row_step = 1, max(1, gram_block // size)
        for c0 in range(0, n_g, chunk):
            n_b = min(chunk, n_g - c0)
            for r0 in range(0, size - 1, row_step):
                r1 = min(size, r0 + row_step)
                aa, bb = np.nonzero(np.arange(r0, r1)[:, None] < np.arange(size)[None, :])
                yield off + c0 * size, n_b, size, r0, r1, aa, bb


def _pair_ends(
    x: np.ndarray, g: int, a1: np.ndarray, a2: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per-key values ``x`` (n_b * g,) of consecutive examples of ``g`` keys each, at the two
    keys of every pair ``(a1[p], a2[p])`` of every example: two (n_b * P,) arrays, example-major
    (the order of the block's Gram entries)."""
    xb = x.reshape(-1, g)
    return np.take(xb, a1, axis=1).ravel(), np.take(xb, a2, axis=1).ravel()


def exhaustive_bucket(
    keys_rot: np.ndarray,
    key_pos: np.ndarray,
    counts: np.ndarray,
    model: QueryModel,
    *,
    bucket_width: float,
    num_pairs: int,
    var_floor: float = 1e-12,
    rows: np.ndarray | None = None,
    queries: np.ndarray | None = None,
    keys_raw: np.ndarray | None = None,
    gram_block: int = GRAM_BLOCK,
    heat_dense_max: int = HEAT_DENSE_MAX,
) -> BucketEstimate:
    """Exact AP_j over every admissible pair (``pairs='exhaustive'``), with its heatmap accumulators.

    keys_rot : (n_e, d) rotated eligible keys laid out example by example (``counts`` (E,) keys
    per example, as in :func:`sample_pairs`); key_pos : (n_e,) their positions.  With ``rows``
    (n_e,) the layout is ``keys_rot[rows]`` / ``key_pos[rows]`` instead (saves a copy).
    With ``u = K w`` and the Gram matrix ``G = K Sigma' K^T`` of each example, a pair (a, b)
    has ``m = u_a - u_b`` and ``v = G_aa + G_bb - 2 G_ab``: cost O(G_e d² + G_e² d) per example
    instead of O(d²) per pair.  ``G = F F^T`` with ``F = K U^T`` (``Sigma' = U^T U``, one
    triangular multiply) or ``F = K sqrt(Sigma')`` (diagonal modes); examples of equal size are
    grouped and batched into one stacked GEMM over views (no per-block gathers).

    ``se`` is the standard error the *sampled* estimator would have with ``num_pairs`` draws:
    ``sd_pop(PP) / sqrt(num_pairs)`` when ``A > num_pairs``; 0 when ``A <= num_pairs`` (the
    sampled mode then uses every pair once, i.e. this very computation).  [RES] 0, not
    ``sd / sqrt(min(P, A))``: a sampled run with A <= P has no sampling noise.

    gram_block : max float64 entries of one batched Gram block (memory bound of this function);
    heat_dense_max : see :class:`HeatmapAccumulator`.

    queries, keys_raw : optional (n_j, d) real queries of the bucket and (n, d) keys laid out
    like ``keys_rot`` but *unrotated* (raw or sign-oriented; dot products with queries in the
    same frame).  Given both (n_j >= 2), the empirical estimate over the same pairs
    is returned in ``BucketEstimate.empirical``: one GEMM of the bucket's keys against its
    queries, then for each pair the share of queries scoring k1 above k2.
    """
    total = int(admissible_pair_counts(counts).sum())
    if total == 0:
        return BucketEstimate(0, math.nan, math.nan, math.nan, True, None)
    perm, groups = _size_grouped_layout(counts)
    if rows is not None:
        perm = np.asarray(rows)[perm]
    K = np.take(np.asarray(keys_rot, dtype=np.float64), perm, axis=0)
    pos = np.take(np.asarray(key_pos, dtype=np.float64), perm)
    d = K.shape[1]
    u = K @ model.w
    # Gram factors: G = left @ right^T.  Symmetric (left is right, half the flops) when
    # Sigma' = U^T U is available (full) or diagonal and >= 0; else left = K Sigma', right = K.
    S = model.sigma_prime()
    if model.chol is not None:
        # (U K^T)^T, C-contiguous; K is this call's own copy (taken above) and not read again,
        # so the product overwrites it instead of a copy of it
        left = _blas.dtrmm(1.0, model.chol, K.T, side=0, lower=0, overwrite_b=1).T
        right = left
    elif S.ndim == 1 and (S >= 0).all():
        left = right = K * np.sqrt(S)
    else:
        left, right = (K * S if S.ndim == 1 else K @ S), K
    gdiag = np.einsum("ij,ij->i", left, right)
    heat = HeatmapAccumulator(
        model.tau, float(bucket_width), float(pos.min()), float(pos.max()), heat_dense_max
    )
    s_pp = s_pp2 = s_z = 0.0
    emp = None
    if queries is not None and keys_raw is not None and len(queries) >= 2:
        Qe = np.asarray(queries, dtype=np.float64)
        # scores of every key of the layout against every query: (n_e, n_j), rows contiguous
        scores = np.take(np.asarray(keys_raw), perm, axis=0).astype(np.float64) @ Qe.T
        emp = _EmpiricalSums()
        chunk = max(1, _EMP_CHUNK // len(Qe))
    for off, n_b, g, r0, r1, aa, bb in _pair_blocks(groups, gram_block):
        stop = off + n_b * g
        rb = right[off:stop].reshape(n_b, g, d)
        lb = (left[off:stop].reshape(n_b, g, d))[:, r0:r1]
        gram = np.matmul(lb, rb.transpose(0, 2, 1)).reshape(n_b, (r1 - r0) * g)
        gab = np.take(gram, aa * g + bb, axis=1).ravel()
        a1 = r0 + aa
        u1, u2 = _pair_ends(u[off:stop], g, a1, bb)
        m = u1 - u2
        g1, g2 = _pair_ends(gdiag[off:stop], g, a1, bb)
        v = g1 + g2 - 2.0 * gab
        pp, z = _pp_from_mv(m, v, var_floor)
        s_pp += float(pp.sum())
        s_pp2 += float(pp @ pp)
        s_z += float(np.abs(z).sum())
        heat.add(*_pair_ends(pos[off:stop], g, a1, bb), pp)
        if emp is not None:
            base = (off + g * np.arange(n_b))[:, None]
            i1 = (base + a1).ravel()
            i2 = (base + bb).ravel()
            for c0 in range(0, len(i1), chunk):
                c1 = c0 + chunk
                diff = np.take(scores, i1[c0:c1], axis=0) - np.take(scores, i2[c0:c1], axis=0)
                emp.add(pp[c0:c1], empirical_pair_plasticity(net_wins(diff), len(Qe)))
    ap = s_pp / total
    if total <= num_pairs:
        se = 0.0
    else:
        se = math.sqrt(max(s_pp2 / total - ap * ap, 0.0) / num_pairs)
    return BucketEstimate(
        total,
        ap,
        se,
        s_z / total,
        True,
        heat,
        emp.exhaustive(num_pairs) if emp is not None else None,
    )


def sampled_bucket(
    rng: np.random.Generator,
    keys_rot: np.ndarray,
    key_pos: np.ndarray,
    elig: np.ndarray,
    counts: np.ndarray,
    model: QueryModel,
    *,
    bucket_width: float,
    num_pairs: int,
    var_floor: float,
    buffers: tuple[np.ndarray, np.ndarray] | None = None,
    queries: np.ndarray | None = None,
    keys_raw: np.ndarray | None = None,
    gram_block: int = GRAM_BLOCK,
    heat_dense_max: int = HEAT_DENSE_MAX,
) -> BucketEstimate:
    """Sampled AP_j (``pairs='sampled'``): P i.i.d. pairs; exact (no RNG use) when ``A <= P``.

    keys_rot (n_k, d) / key_pos (n_k,) are all keys; ``elig`` (n_e,) indexes the eligible ones in
    the example-by-example layout described by ``counts``.  ``buffers``: two (P, d) float64
    scratch arrays reused across buckets.
    ``se = sd(PP, ddof=1) / sqrt(P)`` over the drawn pairs ([RES] ddof=1).
    ``queries`` / ``keys_raw`` (see :func:`exhaustive_bucket`): the empirical estimate on the
    very pairs drawn here (paired with the Gaussian one).  ``gram_block``, ``heat_dense_max``:
    see :func:`exhaustive_bucket` and :class:`HeatmapAccumulator`.
    """
    total = int(admissible_pair_counts(counts).sum())
    if total <= num_pairs:
        return exhaustive_bucket(
            keys_rot,
            key_pos,
            counts,
            model,
            bucket_width=bucket_width,
            num_pairs=num_pairs,
            var_floor=var_floor,
            rows=elig,
            queries=queries,
            keys_raw=keys_raw,
            gram_block=gram_block,
            heat_dense_max=heat_dense_max,
        )
    i1, i2 = sample_pairs(rng, counts, num_pairs)
    i1, i2 = elig[i1], elig[i2]
    d = keys_rot.shape[1]
    if buffers is None or buffers[0].shape != (num_pairs, d):
        buffers = (np.empty((num_pairs, d)), np.empty((num_pairs, d)))
    delta, tmp = buffers
    # the indices are valid rows: mode="clip" leaves them as they are and spares the bounds-checked
    # take its extra copy (with ``out`` and the default mode="raise", numpy gathers into a
    # temporary array first, so that an invalid index leaves ``out`` untouched)
    np.take(keys_rot, i1, axis=0, out=delta, mode="clip")
    np.subtract(delta, np.take(keys_rot, i2, axis=0, out=tmp, mode="clip"), out=delta)
    pp, z = pair_plasticity(
        delta,
        model.w,
        model.sigma2_pos,
        model.cov,
        var_floor,
        chol=model.chol,
        overwrite_delta=True,
    )
    epos = key_pos[elig]
    heat = HeatmapAccumulator(
        model.tau, float(bucket_width), float(epos.min()), float(epos.max()), heat_dense_max
    )
    heat.add(key_pos[i1], key_pos[i2], pp)
    se = _sample_se(pp)
    emp = None
    if queries is not None and keys_raw is not None and len(queries) >= 2:
        Qe = np.asarray(queries, dtype=np.float64)
        wins = np.empty(len(i1))
        step = max(1, _EMP_CHUNK // len(Qe))
        for c0 in range(0, len(i1), step):
            delta = np.take(keys_raw, i1[c0 : c0 + step], axis=0).astype(np.float64)
            delta -= np.take(keys_raw, i2[c0 : c0 + step], axis=0)  # exact for float32 keys
            wins[c0 : c0 + step] = net_wins(delta @ Qe.T)
        pp_e = empirical_pair_plasticity(wins, len(Qe))
        emp = EmpiricalEstimate(float(pp_e.mean()), _sample_se(pp_e), _sample_se(pp - pp_e))
    return BucketEstimate(
        num_pairs, float(pp.mean()), se, float(np.abs(z).mean()), False, heat, emp
    )
