"""RoPE frequency bands of one head (docs/metrics/rope.md).

The head's planes come with it (``HeadData.rope``, from the warehouse catalog
``rope_frequencies``); each plane is a pair of head dims (dim_a, dim_b) turned at ``inv_freq``
radians per token, or one unrotated dim.  Bands: ``high`` (wavelength < m), ``mid``, ``low``
(wavelength >= L_ctx) and ``unrotated`` (docs/metrics/rope.md#planes-and-bands), recomputed here
from the wavelengths with the head's bucket size m and context length L_ctx.

Three tables (all arithmetic in float64):

* ``rope_planes``: per plane, the query/key energy (mean of q_a² + q_b² over the raw captured
  vectors, no centring), its share of the energy of all d dims, and the mean and sample sd
  (ddof = 1) of the plane's logit contribution q_a k_a + q_b k_b over every causal same-example
  (query, key) pair (key position <= query position);
* ``rope_band_plasticity``: the plasticity pipeline (:mod:`qkwh.analyses.plasticity`, same
  parameters, estimator, eligibility and pair-sampling RNG, hence the very same pairs) re-fitted
  on the band's dims (``only``) or on all other dims (``without``), one row per query bucket with
  the columns of ``plasticity_buckets``;
* ``rope_band_logits``: per band and distance bin ``floor((t - s) / m)`` over the same causal
  pairs, the count, sum and sum of squares of the band's logit contribution, with mean and sd.

Pairs are never all materialised at once: examples are taken in blocks of at most
:data:`PAIR_BLOCK` (query, key) cells (a larger example with its queries split).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from qkwh.analyses import plasticity
from qkwh.analyses.declared.plasticity import PlasticityParams
from qkwh.analyses.declared.rope import RopeParams
from qkwh.analyses.moments import QueryMoments, query_moments
from qkwh.analyses.types import AnalysisResult, HeadData, RopePlanes
from qkwh.rope_config import BANDS, band_of, plane_dims
from qkwh.rope_config import planes as frequency_planes

PLANES, BAND_PLASTICITY, BAND_LOGITS = "rope_planes", "rope_band_plasticity", "rope_band_logits"
#: (query, key) cells of one block of the pair sums (bounds the temporaries: 8 bytes each)
PAIR_BLOCK = 1 << 20
#: small examples are grouped into blocks of at most this many cells (their cross-example cells
#: are computed and masked out, so larger groups waste work on short examples)
GROUP_CELLS = 1 << 14


@dataclass(frozen=True)
class HeadPlanes:
    """The planes of one head as this analysis uses them (P planes).

    plane, dim_a : (P,) int64;  dim_b : (P,) int64, -1 for an unrotated dim
    inv_freq, wavelength : (P,) float64;  band : (P,) object array of band names
    layout : the layout the dims follow
    """

    plane: np.ndarray
    dim_a: np.ndarray
    dim_b: np.ndarray
    inv_freq: np.ndarray
    wavelength: np.ndarray
    band: np.ndarray
    layout: str

    def band_dims(self, band: str) -> np.ndarray:
        """(n,) the sorted head dims of ``band``'s planes."""
        sel = self.band == band
        dims = np.concatenate([self.dim_a[sel], self.dim_b[sel & (self.dim_b >= 0)]])
        return np.sort(dims)

    @property
    def bands(self) -> tuple[str, ...]:
        """The bands present, in the order of :data:`BANDS`."""
        return tuple(b for b in BANDS if np.any(self.band == b))


def layer_planes(
    head_dim: int,
    inv_freq: np.ndarray | None,
    *,
    bucket_size: int,
    context_length: int,
    layout: str = "half",
    source: str = "capture",
) -> RopePlanes:
    """The :class:`~qkwh.analyses.types.RopePlanes` of a layer from its inv_freq vector
    ((d_rot // 2,) radians per token, or None for a NoPE layer), laid out like the catalog
    ``rope_frequencies`` (for ``HeadData.rope`` outside a warehouse: tests, your own heads)."""
    ps = frequency_planes(
        head_dim, inv_freq, bucket_size=bucket_size, context_length=context_length, layout=layout
    )
    return RopePlanes(
        plane=np.array([p.plane for p in ps], dtype=np.int64),
        dim_a=np.array([p.dim_a for p in ps], dtype=np.int64),
        dim_b=np.array([-1 if p.dim_b is None else p.dim_b for p in ps], dtype=np.int64),
        inv_freq=np.array([p.inv_freq for p in ps], dtype=np.float64),
        wavelength=np.array([p.wavelength for p in ps], dtype=np.float64),
        band=np.array([p.band for p in ps], dtype=object),
        layout=layout,
        source=source,
    )


def head_planes(head: HeadData, params: RopeParams) -> HeadPlanes:
    """The planes of ``head`` (``head.rope``): dims laid out by the layout the capture recorded
    (catalog source ``capture``), else by ``params.layout``; bands from the wavelengths with the
    head's bucket size and context length.  Raises ``ValueError`` when the planes are unknown or
    do not cover the head's d dims exactly once."""
    rp = head.rope
    if rp is None:
        raise ValueError(
            "rope: the RoPE frequencies of this head's model and layer are unknown "
            "(no rope_frequencies rows)"
        )
    layout = rp.layout if rp.source == "capture" else params.layout
    dim_b = np.asarray(rp.dim_b, dtype=np.int64)
    rotated = dim_b >= 0
    n_rot = int(rotated.sum())
    if not rotated[:n_rot].all():
        raise ValueError("rope: the rotated planes must come before the unrotated dims")
    dim_a = np.asarray(rp.dim_a, dtype=np.int64).copy()
    dim_b = dim_b.copy()
    plane = np.asarray(rp.plane, dtype=np.int64)
    for i in range(n_rot):
        dim_a[i], dim_b[i] = plane_dims(int(plane[i]), 2 * n_rot, layout)
    wavelength = np.asarray(rp.wavelength, dtype=np.float64)
    band = np.array(
        [band_of(float(w), head.bucket_size, head.context_length) for w in wavelength],
        dtype=object,
    )
    used = np.concatenate([dim_a, dim_b[rotated]])
    if used.size != head.d or not np.array_equal(np.sort(used), np.arange(head.d)):
        raise ValueError(
            f"rope: the {plane.size} planes of the catalog (rotated width {2 * n_rot}) do not "
            f"cover the head's {head.d} dims once each"
        )
    return HeadPlanes(
        plane,
        dim_a,
        dim_b,
        np.asarray(rp.inv_freq, dtype=np.float64),
        wavelength,
        band,
        layout,
    )


# ---------------------------------------------------------------------------------------------
# Pair sums over causal same-example pairs
# ---------------------------------------------------------------------------------------------
@dataclass
class PairSums:
    """Sums over every causal same-example (query, key) pair (key position <= query position).

    n_pairs : total pair count
    dim_sum : (d,) sum over pairs of q_c k_c per dim c
    dim_sq : (d,) sum over pairs of q_c² k_c² per dim c
    cross : (R,) sum over pairs of q_a q_b k_a k_b per rotated plane (a, b)
    bin_n : (B, nbins) pair count per band and distance bin; bin_sum, bin_sq : (B, nbins) sum and
        sum of squares of the band's contribution sum_{c in band} q_c k_c
    """

    n_pairs: int
    dim_sum: np.ndarray
    dim_sq: np.ndarray
    cross: np.ndarray
    bin_n: np.ndarray
    bin_sum: np.ndarray
    bin_sq: np.ndarray


def _pair_blocks(
    q_example: np.ndarray, k_example: np.ndarray, block: int, group: int
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(query rows, key rows) blocks that together hold every same-example (query, key) cell once:
    consecutive examples grouped while (queries x keys) stays within ``group`` cells (a block's
    cross-example cells are masked out by the caller), an example of more than ``block`` cells
    alone with its queries split.  Rows are indices into the head's arrays."""
    q_order = np.argsort(q_example, kind="stable")
    k_order = np.argsort(k_example, kind="stable")
    qe, ke = q_example[q_order], k_example[k_order]
    ex = np.intersect1d(qe, ke)
    q_lo, q_hi = np.searchsorted(qe, ex, "left"), np.searchsorted(qe, ex, "right")
    k_lo, k_hi = np.searchsorted(ke, ex, "left"), np.searchsorted(ke, ex, "right")
    i, n = 0, len(ex)
    while i < n:
        nk = int(k_hi[i] - k_lo[i])
        if int(q_hi[i] - q_lo[i]) * nk > block:  # one large example, its queries in blocks
            step = max(1, block // nk)
            for a in range(int(q_lo[i]), int(q_hi[i]), step):
                yield q_order[a : min(a + step, int(q_hi[i]))], k_order[k_lo[i] : k_hi[i]]
            i += 1
            continue
        j = i + 1
        while j < n and int(q_hi[j] - q_lo[i]) * int(k_hi[j] - k_lo[i]) <= group:
            j += 1
        yield q_order[q_lo[i] : q_hi[j - 1]], k_order[k_lo[i] : k_hi[j - 1]]
        i = j


def pair_sums(
    head: HeadData, planes: HeadPlanes, band_dims: list[np.ndarray], *, block: int = PAIR_BLOCK
) -> PairSums:
    """The :class:`PairSums` of ``head`` (raw q (n_q, d) and k (n_k, d), float64 accumulation).

    Per block of examples (:func:`_pair_blocks`): the mask M (n_b, n_kb) of causal same-example
    cells as 0/1, then ``M @ K`` gives each query's key sums (the per-dim pair sums),
    ``M @ [K², K_a K_b]`` the squares of the per-plane contributions without forming them per
    pair, and per band the (n_b, n_kb) logit block ``Q_B K_Bᵀ``, binned by distance with one
    bincount.
    """
    d = head.d
    q = np.asarray(head.q, dtype=np.float64)
    k = np.asarray(head.k, dtype=np.float64).reshape(-1, d)
    t = np.asarray(head.q_pos, dtype=np.int64)
    s = np.asarray(head.k_pos, dtype=np.int64)
    m = int(head.bucket_size)
    rot = planes.dim_b >= 0
    ra, rb = planes.dim_a[rot], planes.dim_b[rot]
    nbins = int(t.max() // m) + 1 if t.size else 1
    nband = len(band_dims)
    out = PairSums(
        0,
        np.zeros(d),
        np.zeros(d),
        np.zeros(ra.size),
        np.zeros((nband, nbins), dtype=np.int64),
        np.zeros((nband, nbins)),
        np.zeros((nband, nbins)),
    )
    blocks = _pair_blocks(
        np.asarray(head.q_example), np.asarray(head.k_example), block, min(block, GROUP_CELLS)
    )
    for qr, kr in blocks:
        Q, tq, K = q[qr], t[qr], k[kr]
        dist = tq[:, None] - s[kr][None, :]  # (n_b, n_kb)
        pair = (dist >= 0) & (np.asarray(head.q_example)[qr][:, None] == head.k_example[kr])
        M = pair.astype(np.float64)
        out.n_pairs += int(pair.sum())
        out.dim_sum += np.einsum("ij,ij->j", Q, M @ K)
        MKK = M @ np.concatenate([K * K, K[:, ra] * K[:, rb]], axis=1)  # (n_b, d + R)
        out.dim_sq += np.einsum("ij,ij->j", Q * Q, MKK[:, :d])
        out.cross += np.einsum("ij,ij->j", Q[:, ra] * Q[:, rb], MKK[:, d:])
        sel = np.flatnonzero(pair)
        bins = dist.ravel()[sel] // m
        counts = np.bincount(bins, minlength=nbins)
        for bi, dims in enumerate(band_dims):
            vals = (Q[:, dims] @ K[:, dims].T).ravel()[sel]
            out.bin_n[bi] += counts
            out.bin_sum[bi] += np.bincount(bins, weights=vals, minlength=nbins)
            out.bin_sq[bi] += np.bincount(bins, weights=vals * vals, minlength=nbins)
    return out


def _mean_sd(n: np.ndarray, total: np.ndarray, sq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and sample sd (ddof = 1) from counts, sums and sums of squares (NaN below 1 / 2)."""
    n = np.asarray(n, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(n > 0, total / n, np.nan)
        var = np.where(n > 1, np.maximum(sq - total * total / n, 0.0) / (n - 1), np.nan)
    return mean, np.sqrt(var)


# ---------------------------------------------------------------------------------------------
# Band plasticity: plasticity's own pipeline on a subset of the dims
# ---------------------------------------------------------------------------------------------
def _columns(x: np.ndarray, dims: np.ndarray) -> np.ndarray:
    """Columns ``dims`` of the 2-D ``x`` as a new C-contiguous array (what plasticity's in-place
    steps need)."""
    return np.ascontiguousarray(np.asarray(x)[:, dims])


def restrict_moments(qm: QueryMoments, dims: np.ndarray) -> QueryMoments:
    """``qm`` restricted to the head dims ``dims`` (every statistic is per dim or per dim pair,
    so this is exactly the moments of the restricted queries)."""
    ix = np.ix_(dims, dims)
    return QueryMoments(
        order=qm.order,
        qc=_columns(qm.qc, dims),
        t=qm.t,
        mu=qm.mu[dims],
        buckets=qm.buckets,
        start=qm.start,
        count=qm.count,
        bucket_mean=_columns(qm.bucket_mean, dims),
        bucket_scatter=None
        if qm.bucket_scatter is None
        else qm.bucket_scatter[:, dims][:, :, dims],
        scatter=qm.scatter[ix],
    )


def restrict_keys(kl: plasticity.KeyLayout, dims: np.ndarray) -> plasticity.KeyLayout:
    """``kl`` restricted to the head dims ``dims`` (orientation signs are per dim)."""
    return plasticity.KeyLayout(
        kl.example_ids, kl.example, kl.position, kl.bucket, _columns(kl.k64, dims), kl.signs[dims]
    )


def band_buckets(
    head: HeadData,
    params: PlasticityParams,
    dims: np.ndarray,
    *,
    seed: int,
    moments: QueryMoments | None = None,
    keys: plasticity.KeyLayout | None = None,
) -> dict[str, np.ndarray]:
    """The ``plasticity_buckets`` columns of the plasticity pipeline run on ``head``'s dims
    ``dims`` (sorted, (n,) int): the same parameters, seed and hence pairs as the head's own
    run.  With every dim (``dims = arange(d)``) they equal the head's own rows to the last bit."""
    qm = moments if moments is not None else query_moments(head.q, head.q_pos, head.q_bucket)
    kl = keys if keys is not None else plasticity.head_key_layout(head)
    dims = np.asarray(dims, dtype=np.int64)
    if not np.array_equal(dims, np.arange(head.d)):
        qm, kl = restrict_moments(qm, dims), restrict_keys(kl, dims)
        k = np.asarray(head.k)
        head = dataclasses.replace(
            head, q=_columns(head.q, dims), k=_columns(k.reshape(-1, head.d), dims), rope=None
        )
    res = plasticity.analyse(head, params, seed=seed, moments=qm, keys=kl, diagnostics=False)
    return res.tables[plasticity.BUCKETS]


# ---------------------------------------------------------------------------------------------
# The analysis
# ---------------------------------------------------------------------------------------------
def analyse(
    head: HeadData,
    params: RopeParams,
    plasticity_params: PlasticityParams,
    *,
    seed: int,
    moments: QueryMoments | None = None,
    keys: plasticity.KeyLayout | None = None,
) -> AnalysisResult:
    """The three ``rope_*`` tables of one head (module docstring).

    head : Q (n_q x d), K (n_k x d), row metadata and ``head.rope`` (the layer's planes)
    params : :class:`~qkwh.analyses.declared.rope.RopeParams` (layout, variants)
    plasticity_params : the run's plasticity parameters (the band pipeline uses them as they are)
    seed : the run's base seed (plasticity derives the head's pair seed from it)
    moments, keys : the head's shared query moments and key layout, built here when absent
    """
    if params.variants not in ("only", "only,without"):
        raise ValueError(f"rope.variants must be only or only,without; got {params.variants!r}")
    planes = head_planes(head, params)
    d = head.d
    bands = planes.bands
    band_dims = [planes.band_dims(b) for b in bands]
    result = AnalysisResult()

    # -- rope_planes ----------------------------------------------------------------------------
    q = np.asarray(head.q, dtype=np.float64)
    k = np.asarray(head.k, dtype=np.float64).reshape(-1, d)
    with np.errstate(invalid="ignore", divide="ignore"):
        q_dim = np.einsum("ij,ij->j", q, q) / q.shape[0] if q.shape[0] else np.full(d, np.nan)
        k_dim = np.einsum("ij,ij->j", k, k) / k.shape[0] if k.shape[0] else np.full(d, np.nan)
    rot = planes.dim_b >= 0
    b_idx = np.where(rot, planes.dim_b, 0)

    def per_plane(per_dim: np.ndarray) -> np.ndarray:
        return per_dim[planes.dim_a] + np.where(rot, per_dim[b_idx], 0.0)

    sums = pair_sums(head, planes, band_dims)
    cross = np.zeros(planes.plane.size)
    cross[rot] = sums.cross
    plane_sum = per_plane(sums.dim_sum)
    plane_sq = per_plane(sums.dim_sq) + 2.0 * cross
    logit_mean, logit_sd = _mean_sd(np.full(plane_sum.size, sums.n_pairs), plane_sum, plane_sq)
    q_energy, k_energy = per_plane(q_dim), per_plane(k_dim)
    with np.errstate(invalid="ignore", divide="ignore"):
        q_share = q_energy / q_dim.sum()
        k_share = k_energy / k_dim.sum()
    result.add(
        PLANES,
        {
            "plane": planes.plane,
            "dim_a": planes.dim_a,
            "dim_b": np.array([int(b) if b >= 0 else None for b in planes.dim_b], dtype=object),
            "inv_freq": planes.inv_freq,
            "wavelength": planes.wavelength,
            "band": planes.band,
            "q_energy": q_energy,
            "k_energy": k_energy,
            "q_energy_share": q_share,
            "k_energy_share": k_share,
            "logit_mean": logit_mean,
            "logit_sd": logit_sd,
        },
    )

    # -- rope_band_logits -----------------------------------------------------------------------
    parts: dict[str, list[np.ndarray]] = {c: [] for c in ("band", "distance_bin", "n", "s", "q")}
    for bi, b in enumerate(bands):
        has = np.flatnonzero(sums.bin_n[bi] > 0)
        parts["band"].append(np.array([b] * has.size, dtype=object))
        parts["distance_bin"].append(has.astype(np.int64))
        parts["n"].append(sums.bin_n[bi, has])
        parts["s"].append(sums.bin_sum[bi, has])
        parts["q"].append(sums.bin_sq[bi, has])
    cat = {c: np.concatenate(v) if v else np.zeros(0) for c, v in parts.items()}
    mean, sd = _mean_sd(cat["n"], cat["s"], cat["q"])
    result.add(
        BAND_LOGITS,
        {
            "band": cat["band"].astype(object),
            "distance_bin": cat["distance_bin"].astype(np.int64),
            "n_pairs": cat["n"].astype(np.int64),
            "logit_sum": cat["s"],
            "logit_sum_sq": cat["q"],
            "logit_mean": mean,
            "logit_sd": sd,
        },
    )

    # -- rope_band_plasticity -------------------------------------------------------------------
    qm = moments if moments is not None else query_moments(head.q, head.q_pos, head.q_bucket)
    kl = keys if keys is not None else plasticity.head_key_layout(head)
    variants = params.variants.split(",")
    rows: list[dict[str, np.ndarray]] = []
    for b, dims in zip(bands, band_dims):
        for variant in variants:
            use = dims if variant == "only" else np.setdiff1d(np.arange(d), dims)
            if use.size == 0:  # 'without' the band that holds every dim
                continue
            cols = band_buckets(head, plasticity_params, use, seed=seed, moments=qm, keys=kl)
            n = len(cols["q_bucket"])
            rows.append(
                {
                    "band": np.array([b] * n, dtype=object),
                    "variant": np.array([variant] * n, dtype=object),
                    **cols,
                }
            )
    names = ("band", "variant", *plasticity.COLUMNS[plasticity.BUCKETS])
    result.add(
        BAND_PLASTICITY,
        {c: np.concatenate([r[c] for r in rows]) if rows else np.zeros(0) for c in names},
    )
    return result


def run(
    head: HeadData,
    params: RopeParams,
    *,
    seed: int,
    shared: Mapping[str, Any],
    uses: Mapping[str, Any],
) -> AnalysisResult:
    """The registered function (``qkwh.analyses.declared.rope``): :func:`analyse` with the run's
    plasticity parameters and the shared per-head precomputations."""
    return analyse(
        head,
        params,
        uses["plasticity"],
        seed=seed,
        moments=shared.get("query_moments"),
        keys=shared.get("key_layout"),
    )


__all__ = [
    "HeadPlanes",
    "PairSums",
    "analyse",
    "band_buckets",
    "head_planes",
    "layer_planes",
    "pair_sums",
    "restrict_keys",
    "restrict_moments",
    "run",
]
