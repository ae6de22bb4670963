"""Per-head moments shared by the analyses, the linear-algebra helpers built on them, the row cap.

:class:`HeadMoments` holds the class means, scatter matrices and position cross-moments of one
head; PCA and rotation derive everything d x d from it, so the O(n d^2) pass over the rows is
done once per head (the caller computes it once and passes it to both).

Sign canonicalisation "largest-magnitude loading positive" is sklearn's ``svd_flip`` with
``u_based_decision=False``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.linalg import blas

from qkwh.analyses.types import HeadData

__all__ = ["MIN_ROWS", "BucketedRows", "HeadMoments", "bucketed_rows", "centred_scatter", "head_moments", "validate_head", "orient_largest_positive",
           "complement_basis", "cap_rows"]

#: minimum number of q rows and of k rows an analysis accepts (p-values need n - 2 >= 1)
MIN_ROWS: int = 3


# ---------------------------------------------------------------------------------------------
# linear algebra
# ---------------------------------------------------------------------------------------------
def orient_largest_positive(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Flip each column of ``v`` so that its largest-magnitude entry is positive.

    sklearn's convention for PCA components / right singular vectors (first maximum on ties).

    Parameters
    ----------
    v : (d,) or (d, p) array of column vectors

    Returns
    -------
    (oriented copy of v, signs (p,) in {+1, -1})
    """
    v = np.asarray(v, dtype=np.float64)
    vv = v[:, None] if v.ndim == 1 else v
    idx = np.argmax(np.abs(vv), axis=0)
    signs = np.where(vv[idx, np.arange(vv.shape[1])] < 0, -1.0, 1.0)
    out = vv * signs
    return (out[:, 0] if v.ndim == 1 else out), signs


def complement_basis(axes: np.ndarray) -> np.ndarray:
    """Orthonormal basis of the orthogonal complement of the span of ``axes``' columns.

    Uses a complete Householder QR, so the result is orthogonal to the axes to machine precision
    (|<w, a>| ~ 1e-16), which is what makes ``residual_pos_r`` come out at ~1e-15.

    Parameters
    ----------
    axes : (d, j) orthonormal columns (j < d)

    Returns
    -------
    (d, d - j) array with orthonormal columns
    """
    axes = np.asarray(axes, dtype=np.float64)
    if axes.ndim == 1:
        axes = axes[:, None]
    q, _ = np.linalg.qr(axes, mode="complete")
    return q[:, axes.shape[1]:]


# ---------------------------------------------------------------------------------------------
# per-head moments
# ---------------------------------------------------------------------------------------------
#: per-bucket scatter matrices are kept (B x d x d) only while they take at most this many times
#: the bytes of the rows themselves; beyond (tiny buckets), each is recomputed from its rows on demand
BUCKET_SCATTER_MAX_RATIO: float = 2.0


def centred_scatter(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean (d,) and scatter Σ (x - mean)(x - mean)ᵀ (d, d) of the rows of a float64 (m, d) block."""
    mean = rows.mean(axis=0)
    return mean, _gram(np.subtract(rows, mean))


@dataclass(frozen=True)
class BucketedRows:
    """The rows of one class in float64, sorted by bucket (stable) and centred on their mean.

    Every bucket is then a contiguous block of rows, so per-bucket work takes slices, not
    gathers; per-bucket sums add up to the class's own.

    Attributes
    ----------
    xc : (n, d) float64, row i = input row ``order[i]`` minus ``mu``
    mu : (d,) mean of the input rows (zeros when n = 0)
    order : (n,) int64 stable argsort of the bucket ids
    ids, start, count : (B,) bucket ids (ascending), first row and number of rows of each bucket
    means : (B, d) per-bucket means of ``xc``
    scatters : (B, d, d) per-bucket scatters Σ (xc - mean_b)(xc - mean_b)ᵀ, or None when they
        would take more than ``BUCKET_SCATTER_MAX_RATIO`` x the bytes of ``xc`` (then
        :meth:`bucket_moments` recomputes one from its rows: the same numbers)
    """

    xc: np.ndarray
    mu: np.ndarray
    order: np.ndarray
    ids: np.ndarray
    start: np.ndarray
    count: np.ndarray
    means: np.ndarray
    scatters: np.ndarray | None

    def rows(self, i: int) -> slice:
        """Rows of bucket number ``i`` (0 .. B-1) in ``xc``."""
        return slice(int(self.start[i]), int(self.start[i] + self.count[i]))

    def bucket_moments(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """(mean (d,), scatter (d, d)) of bucket number ``i``, relative to ``xc``'s rows."""
        if self.scatters is not None:
            return self.means[i], self.scatters[i]
        return centred_scatter(self.xc[self.rows(i)])

    def scatter(self) -> np.ndarray:
        """(d, d) Σ_i xc_i xc_iᵀ = Σ_b [S_b + n_b m_b m_bᵀ]: the class scatter from the buckets."""
        d = self.xc.shape[1]
        total = np.zeros((d, d))
        for i in range(len(self.ids)):
            mean, sc = self.bucket_moments(i)
            total += sc
            total += float(self.count[i]) * np.outer(mean, mean)
        return total


def bucketed_rows(x: np.ndarray, bucket: np.ndarray) -> BucketedRows:
    """:class:`BucketedRows` of ``x`` (n, d) grouped by ``bucket`` (n,) ints.

    Cost: one gather + cast to float64, one pass for the mean, and the per-bucket scatters
    (together the flops of one (n, d) Gram matrix).
    """
    x = np.asarray(x)
    n, d = x.shape
    bkt = np.asarray(bucket, dtype=np.int64)
    order = np.argsort(bkt, kind="stable")
    xs = np.take(x, order, axis=0)  # gathered in the input dtype (float32: half the bytes)
    mu = xs.mean(axis=0, dtype=np.float64) if n else np.zeros(d)
    xc = np.subtract(xs, mu, dtype=np.float64)  # cast and centre in one pass
    del xs
    ids, start, count = np.unique(bkt[order], return_index=True, return_counts=True)
    keep = len(ids) * d * d <= BUCKET_SCATTER_MAX_RATIO * max(n, 1) * d
    means = np.empty((len(ids), d))
    scatters = np.empty((len(ids), d, d)) if keep else None
    for i in range(len(ids)):
        block = xc[int(start[i]):int(start[i] + count[i])]
        if keep:
            means[i], scatters[i] = centred_scatter(block)
        else:
            means[i] = block.mean(axis=0)
    return BucketedRows(xc, mu, order.astype(np.int64), ids, start.astype(np.int64), count.astype(np.int64),
                        means, scatters)


@dataclass(frozen=True)
class HeadMoments:
    """Float64 copies and first/second moments of one head (shared by PCA, rotation, plasticity).

    Scatter/cross sums are *unnormalised* (divide by n - 1 or n as needed).  The query rows are in
    bucket order (``q_rows.order``), the key rows in input order; every statistic here is free of
    row order.

    Attributes
    ----------
    qc : (n_q, d) float64 query rows centred on their class mean (raw row = qc + mu_q), sorted by
        bucket: ``qc[i]`` is input row ``q_rows.order[i]``
    kc : (n_k, d) key rows centred on mu_k (input order)
    t : (n_q,) query positions (float64) in the order of ``qc``;  s : (n_k,) key positions
    q_rows : the queries by bucket (``q_rows.xc is qc``), with per-bucket means and scatters
    mu_q, mu_k : (d,) class means
    scatter_q : (d, d) Σ_i (q_i - mu_q)(q_i - mu_q)ᵀ;  scatter_k likewise
    cross_qt : (d,) Σ_i (q_i - mu_q)(t_i - t̄);  cross_ks : Σ_j (k_j - mu_k)(s_j - s̄)
    t_mean, s_mean : mean positions;  stt, sss : Σ(t - t̄)², Σ(s - s̄)²
    msq_q, msq_k : mean squared norm of the raw rows (rounding scale, see ZERO_VAR_REL)
    """

    qc: np.ndarray
    kc: np.ndarray
    t: np.ndarray
    s: np.ndarray
    mu_q: np.ndarray
    mu_k: np.ndarray
    scatter_q: np.ndarray
    scatter_k: np.ndarray
    cross_qt: np.ndarray
    cross_ks: np.ndarray
    t_mean: float
    s_mean: float
    stt: float
    sss: float
    msq_q: float
    msq_k: float
    q_rows: BucketedRows

    def q_input_rows(self, idx: np.ndarray) -> np.ndarray:
        """Centred query rows of the given *input* row indices (n,) -> (n, d)."""
        rank = np.empty_like(self.q_rows.order)
        rank[self.q_rows.order] = np.arange(rank.size)
        return self.qc[rank[np.asarray(idx, dtype=np.int64)]]

    @property
    def n_q(self) -> int:
        return int(self.qc.shape[0])

    @property
    def n_k(self) -> int:
        return int(self.kc.shape[0])

    @property
    def n(self) -> int:
        return self.n_q + self.n_k

    @property
    def d(self) -> int:
        return int(self.qc.shape[1])

    @property
    def delta_mu(self) -> np.ndarray:
        """(d,) mu_q - mu_k."""
        return self.mu_q - self.mu_k

    @property
    def mean(self) -> np.ndarray:
        """(d,) pooled mean x̄ of [Q; K]."""
        return (self.n_q * self.mu_q + self.n_k * self.mu_k) / self.n

    @property
    def tau_mean(self) -> float:
        return (self.n_q * self.t_mean + self.n_k * self.s_mean) / self.n

    @property
    def scatter(self) -> np.ndarray:
        """(d, d) pooled scatter Σ_n (x_n - x̄)(x_n - x̄)ᵀ (exact decomposition into classes)."""
        dm = self.delta_mu
        return self.scatter_q + self.scatter_k + (self.n_q * self.n_k / self.n) * np.outer(dm, dm)

    @property
    def cross(self) -> np.ndarray:
        """(d,) pooled Σ_n (x_n - x̄)(τ_n - τ̄)."""
        w = self.n_q * self.n_k / self.n
        return self.cross_qt + self.cross_ks + w * self.delta_mu * (self.t_mean - self.s_mean)

    @property
    def stau(self) -> float:
        """Pooled Σ(τ - τ̄)²."""
        w = self.n_q * self.n_k / self.n
        return self.stt + self.sss + w * (self.t_mean - self.s_mean) ** 2

    @property
    def msq(self) -> float:
        """Pooled mean squared norm of the raw rows."""
        return (self.n_q * self.msq_q + self.n_k * self.msq_k) / self.n

    @property
    def tau(self) -> np.ndarray:
        """(N,) pooled positions [t; s]."""
        return np.concatenate([self.t, self.s])


def validate_head(head: HeadData, *, min_rows: int = MIN_ROWS) -> None:
    """Raise ``ValueError`` with a clear message if ``head`` cannot be analysed."""
    q, k = np.asarray(head.q), np.asarray(head.k)
    if q.ndim != 2 or k.ndim != 2:
        raise ValueError(f"q and k must be 2-D (rows x d); got shapes {q.shape} and {k.shape}")
    if q.shape[1] != k.shape[1]:
        raise ValueError(f"q and k have different head dimensions: {q.shape[1]} vs {k.shape[1]}")
    if q.shape[1] < 1:
        raise ValueError("head dimension d must be >= 1")
    if q.shape[0] < min_rows or k.shape[0] < min_rows:
        raise ValueError(
            f"too few rows: need at least {min_rows} query and {min_rows} key rows, "
            f"got n_q={q.shape[0]}, n_k={k.shape[0]}"
        )
    for name, arr, n in (("q_pos", head.q_pos, q.shape[0]), ("k_pos", head.k_pos, k.shape[0])):
        if np.asarray(arr).shape != (n,):
            raise ValueError(f"{name} has shape {np.asarray(arr).shape}, expected ({n},)")
    if not (np.isfinite(q).all() and np.isfinite(k).all()):
        raise ValueError("q/k contain NaN or Inf")


def _gram(xc: np.ndarray) -> np.ndarray:
    """xcᵀ xc for a C-contiguous float64 (n, d) array, via BLAS dsyrk (half the flops of gemm)."""
    upper = blas.dsyrk(1.0, xc.T, trans=0)  # xc.T is Fortran-contiguous: no copy
    return np.triu(upper) + np.triu(upper, 1).T


def head_moments(head: HeadData) -> HeadMoments:
    """The :class:`HeadMoments` of ``head``.

    Cost O((n_q + n_k) d²): the only pass over the rows that is quadratic in d.  The query
    scatter is the sum of the per-bucket ones (which the plasticity analysis reuses), so the
    queries are gone over once.  Callers that run several analyses on the same head compute it
    once and pass it to each (``moments=``).
    """
    validate_head(head)
    q_rows = bucketed_rows(head.q, head.q_bucket)
    t = np.asarray(head.q_pos, dtype=np.float64)[q_rows.order]
    s = np.asarray(head.k_pos, dtype=np.float64)

    def position_moments(xc: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, float, float]:
        pm = float(p.mean())
        pc = p - pm
        return pc @ xc, pm, float(pc @ pc)

    qc, mu_q = q_rows.xc, q_rows.mu
    sc_q = q_rows.scatter()
    k = np.asarray(head.k)
    mu_k = k.mean(axis=0, dtype=np.float64)
    kc = np.subtract(k, mu_k, dtype=np.float64)  # cast and centre in one pass
    sc_k = _gram(kc)
    cr_q, tm, stt = position_moments(qc, t)
    cr_k, sm, sss = position_moments(kc, s)
    return HeadMoments(
        qc=qc, kc=kc, t=t, s=s, mu_q=mu_q, mu_k=mu_k, scatter_q=sc_q, scatter_k=sc_k,
        cross_qt=cr_q, cross_ks=cr_k, t_mean=tm, s_mean=sm, stt=stt, sss=sss,
        msq_q=float(np.trace(sc_q)) / qc.shape[0] + float(mu_q @ mu_q),
        msq_k=float(np.trace(sc_k)) / kc.shape[0] + float(mu_k @ mu_k), q_rows=q_rows,
    )


# ---------------------------------------------------------------------------------------------
# Row cap of spec §2 (applied by the caller to Q and K separately, with the same seed)
# ---------------------------------------------------------------------------------------------
def cap_rows(n: int, cap: int, seed: int) -> np.ndarray | None:
    """Row indices kept by the ``max_tokens_per_head`` cap, or ``None`` when ``n <= cap``.

    ``default_rng(seed).choice(n, cap, replace=False)`` (CODE AP ``data_utils.py``), returned
    sorted (int64, shape ``(cap,)``) so that row order -- and everything downstream -- does not
    depend on the draw order.  The caller applies it separately to Q and K with the same seed.
    """
    n, cap = int(n), int(cap)
    if cap <= 0:
        raise ValueError(f"max_tokens_per_head must be positive; got {cap}")
    if n <= cap:
        return None
    idx = np.random.default_rng(seed).choice(n, cap, replace=False)
    return np.sort(idx).astype(np.int64)
