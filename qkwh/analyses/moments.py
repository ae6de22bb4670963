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

from qkwh.analyses.types import HeadData

__all__ = [
    "MIN_ROWS",
    "MAX_QUERY_BUCKETS",
    "HeadMoments",
    "KeyMoments",
    "QueryMoments",
    "head_moments",
    "key_moments",
    "query_moments",
    "validate_head",
    "orient_largest_positive",
    "complement_basis",
    "cap_rows",
]

#: minimum number of q rows and of k rows an analysis accepts (p-values need n - 2 >= 1)
MIN_ROWS: int = 3
#: above this many distinct query buckets the per-bucket scatter matrices are not formed
#: (``QueryMoments.bucket_scatter`` is None and the head's scatter is one Gram of all rows)
MAX_QUERY_BUCKETS: int = 1024


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
    return q[:, axes.shape[1] :]


# ---------------------------------------------------------------------------------------------
# per-head moments
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class QueryMoments:
    """The queries of one head in bucket order, centred, with their per-bucket moments (float64).

    Computed once per head and shared by PCA, rotation (through :class:`HeadMoments`) and
    plasticity: the per-bucket scatter matrices are the plasticity query models' covariances, and
    they add up (with the between-bucket term) to the head's query scatter, so the O(n d²) pass
    over the query rows is made once.

    Attributes
    ----------
    order : (n_q,) int64; row r of ``qc`` is file row ``order[r]`` (stable sort by bucket)
    qc : (n_q, d) the query rows in that order minus their mean ``mu``
    t : (n_q,) their positions (float64), same order
    mu : (d,) mean query
    buckets : (B,) the distinct buckets, ascending; ``start``, ``count`` : (B,) int64, bucket i
        is rows ``start[i] : start[i] + count[i]`` of ``qc``
    bucket_mean : (B, d) mean of each bucket's rows of ``qc`` (= bucket mean minus ``mu``)
    bucket_scatter : (B, d, d) Σ over the bucket of (x - x̄_b)(x - x̄_b)ᵀ, formed as the bucket's
        Gram about ``mu`` minus ``count_b · bucket_mean_b bucket_mean_bᵀ``; None when there are
        more than :data:`MAX_QUERY_BUCKETS` buckets
    scatter : (d, d) Σ over all rows of (x - mu)(x - mu)ᵀ, the sum of the buckets' Gram
        matrices about ``mu``
    """

    order: np.ndarray
    qc: np.ndarray
    t: np.ndarray
    mu: np.ndarray
    buckets: np.ndarray
    start: np.ndarray
    count: np.ndarray
    bucket_mean: np.ndarray
    bucket_scatter: np.ndarray | None
    scatter: np.ndarray

    @property
    def n(self) -> int:
        return int(self.qc.shape[0])

    def file_rows(self, rows: np.ndarray) -> np.ndarray:
        """Positions in ``qc`` of the file rows ``rows`` (the inverse of ``order``)."""
        inv = np.empty_like(self.order)
        inv[self.order] = np.arange(self.order.size)
        return inv[np.asarray(rows, dtype=np.int64)]


def query_moments(q: np.ndarray, q_pos: np.ndarray, q_bucket: np.ndarray) -> QueryMoments:
    """The :class:`QueryMoments` of query rows ``q`` (n_q, d) with positions and buckets (n_q,).

    No validation (an empty ``q`` gives NaN means); cost one gather and cast of the rows, one
    pass to centre them and one Gram matrix per bucket (O(n_q d²) in all, as for one Gram of
    all rows).
    """
    qb = np.asarray(q_bucket, dtype=np.int64)
    order = np.argsort(qb, kind="stable")
    xc = np.take(np.asarray(q), order, axis=0).astype(
        np.float64, copy=False
    )  # a new C-ordered array
    t = np.asarray(q_pos, dtype=np.float64)[order]
    n, d = xc.shape
    mu = xc.mean(axis=0) if n else np.full(d, np.nan)
    xc -= mu
    buckets, start, count = np.unique(qb[order], return_index=True, return_counts=True)
    nb = len(buckets)
    bucket_mean = np.empty((nb, d))
    bucket_scatter = np.empty((nb, d, d)) if nb <= MAX_QUERY_BUCKETS else None
    scatter = np.zeros((d, d))
    for i in range(nb):
        rows = xc[int(start[i]) : int(start[i] + count[i])]
        m = rows.mean(axis=0)
        bucket_mean[i] = m
        if bucket_scatter is not None:
            # Gram of the bucket's rows about the head mean; minus the bucket-mean term it is the
            # bucket's own scatter (rows are centred on mu already: no large offset cancels)
            g = _gram(rows)
            scatter += g
            g -= float(count[i]) * np.outer(m, m)
            bucket_scatter[i] = g
    if bucket_scatter is None:
        scatter = _gram(xc)
    return QueryMoments(
        order=order,
        qc=xc,
        t=t,
        mu=mu,
        buckets=buckets,
        start=start.astype(np.int64),
        count=count.astype(np.int64),
        bucket_mean=bucket_mean,
        bucket_scatter=bucket_scatter,
        scatter=scatter,
    )


@dataclass(frozen=True)
class HeadMoments:
    """Float64 copies and first/second moments of one head (shared by PCA and rotation).

    Scatter/cross sums are *unnormalised* (divide by n - 1 or n as needed).

    The query side comes from the head's :class:`QueryMoments` (rows in bucket order, see
    ``query``); the key rows keep their file order.

    Attributes
    ----------
    qc : (n_q, d) float64 query rows centred on their class mean (raw row = qc + mu_q), in
        bucket order (``query.order``)
    kc : (n_k, d) key rows centred on mu_k (file order)
    t : (n_q,) query positions (float64, order of ``qc``);  s : (n_k,) key positions
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
    query: QueryMoments

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
    """xcᵀ xc for a C-contiguous float64 (n, d) array.

    numpy computes ``A.T @ A`` with BLAS dsyrk (half the flops of a general product) and mirrors
    the triangle itself, which is faster than calling dsyrk and symmetrising here.
    """
    return xc.T @ xc


@dataclass(frozen=True)
class KeyMoments:
    """The key rows of one head as float64, centred, with their moments (read-only arrays).

    They depend on the key rows alone, so the heads of one GQA group (one k file, several query
    heads) can share them: ``qkwh compute`` builds them once per group.

    Attributes
    ----------
    kc : (n_k, d) key rows centred on ``mu_k`` (file order);  s : (n_k,) key positions (float64)
    mu_k : (d,) mean key;  scatter_k : (d, d) Σ_j (k_j - mu_k)(k_j - mu_k)ᵀ
    cross_ks : (d,) Σ_j (k_j - mu_k)(s_j - s̄);  s_mean : s̄;  sss : Σ(s - s̄)²
    msq_k : mean squared norm of the raw key rows
    """

    kc: np.ndarray
    s: np.ndarray
    mu_k: np.ndarray
    scatter_k: np.ndarray
    cross_ks: np.ndarray
    s_mean: float
    sss: float
    msq_k: float


def _position_moments(xc: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, float, float]:
    """(Σ_i xc_i (p_i - p̄), p̄, Σ (p_i - p̄)²) for centred rows ``xc`` (n, d) and positions (n,)."""
    pm = float(p.mean())
    pc = p - pm
    return pc @ xc, pm, float(pc @ pc)


def key_moments(k: np.ndarray, k_pos: np.ndarray) -> KeyMoments:
    """The :class:`KeyMoments` of key rows ``k`` (n_k, d) at positions ``k_pos`` (n_k,).

    No validation (see :func:`validate_head`); cost one cast and one Gram matrix of the rows.
    """
    s = np.array(k_pos, dtype=np.float64)
    kc = np.array(k, dtype=np.float64, order="C", copy=True)
    mu_k = kc.mean(axis=0)
    kc -= mu_k
    sc_k = _gram(kc)
    msq_k = float(np.trace(sc_k)) / kc.shape[0] + float(mu_k @ mu_k)
    cr_k, sm, sss = _position_moments(kc, s)
    for a in (s, kc, mu_k, sc_k, cr_k):
        a.flags.writeable = False  # shared between heads: never modified in place
    return KeyMoments(
        kc=kc, s=s, mu_k=mu_k, scatter_k=sc_k, cross_ks=cr_k, s_mean=sm, sss=sss, msq_k=msq_k
    )


def head_moments(
    head: HeadData, *, query: QueryMoments | None = None, keys: KeyMoments | None = None
) -> HeadMoments:
    """The :class:`HeadMoments` of ``head``.

    Cost O((n_q + n_k) d²) — the only pass over the rows that is quadratic in d.  Callers that run
    several analyses on the same head compute it once and pass it to each (``moments=``);
    ``query`` and ``keys`` are the head's :func:`query_moments` and :func:`key_moments` when
    already computed (each is otherwise built here).
    """
    validate_head(head)
    qm = query if query is not None else query_moments(head.q, head.q_pos, head.q_bucket)
    km = keys if keys is not None else key_moments(head.k, head.k_pos)
    cr_q, tm, stt = _position_moments(qm.qc, qm.t)
    msq_q = float(np.trace(qm.scatter)) / qm.n + float(qm.mu @ qm.mu)
    return HeadMoments(
        qc=qm.qc,
        kc=km.kc,
        t=qm.t,
        s=km.s,
        mu_q=qm.mu,
        mu_k=km.mu_k,
        scatter_q=qm.scatter,
        scatter_k=km.scatter_k,
        cross_qt=cr_q,
        cross_ks=km.cross_ks,
        t_mean=tm,
        s_mean=km.s_mean,
        stt=stt,
        sss=km.sss,
        msq_q=msq_q,
        msq_k=km.msq_k,
        query=qm,
    )


# ---------------------------------------------------------------------------------------------
# Row cap ``max_tokens_per_head`` (docs/README.md#parameters-and-modes), applied by the caller
# to Q and K separately, with the same seed
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
