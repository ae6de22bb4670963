"""Softmax reach of one head (docs/metrics/reach.md).

Plasticity compares two keys at a time; the softmax normalises over every admissible key.  This
analysis estimates, from the same sampled vectors, where the softmax mass of each query goes as a
function of distance, with a Horvitz-Thompson sum over the kept keys:

* score s_ij = tau * q_i . k_j (tau = the capture's recorded scaling, else 1/sqrt(d)), with a
  soft-cap c: s <- c * tanh(s / c);
* admissible keys of query (e, t): same example, key position s <= t and t - s < W when the row
  has a sliding window W;
* keep probability pi(s) of key position s from the capture's sampler (``uniform``:
  min(1, base_rate / m); ``log_uniform``: min(1, base_rate / 2^bucket(s)); ``all``: 1), and 1
  below ``keep_first``;
* w_ij = exp(s_ij - max_j s_ij) / pi(s_j), Z_i = sum_j w_ij; mass_i(r) = the share of Z_i in
  distance bin r = floor((t - s) / m); distance_i = sum w (t - s) / Z; reach_i = distance_i /
  uniform_i with uniform_i = min(t, W - 1) / 2 the mean distance under uniform attention over the
  admissible positions; sink_i = the share on positions < keep_first; ess_i = Z^2 / sum w^2.

Queries at position 0 (more generally with a single admissible position) and queries without a
kept admissible key are skipped and counted.  With every key kept (pi = 1) the estimate is the
exact softmax of the sampled keys; otherwise it is a ratio estimator (bias O(1/n)).

Two tables (all arithmetic in float64): ``reach_buckets`` (per query bucket and distance bin
r <= the bucket's largest query bin: n_queries, mass, uniform_mass, lift, mass_exact) and
``reach_heads`` (one row).  The exact counterparts come from the capture's optional q-file
columns (``HeadData.exact``), averaged over the same queries as the estimate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from qkwh.analyses.declared.reach import ReachParams
from qkwh.analyses.types import AnalysisResult, AttentionFacts, HeadData

BUCKETS, HEADS = "reach_buckets", "reach_heads"
#: (query, key) cells of one block (bounds the temporaries: a few float64 arrays of this size)
BLOCK_CELLS = 1 << 20
#: the positions the exact ``attn_sink`` column covers (docs/input-format.md)
EXACT_SINK_POSITIONS = 4


def keep_probability(positions: np.ndarray, facts: AttentionFacts) -> np.ndarray:
    """(n,) float64 keep probability pi(s) of each key position under the capture's sampler."""
    s = np.asarray(positions, dtype=np.int64)
    m = int(facts.sampler_bucket_size)
    rate = float(facts.base_rate)
    if facts.sampler == "all":
        p = np.ones(s.shape, dtype=np.float64)
    elif facts.sampler == "uniform":
        p = np.full(s.shape, min(1.0, rate / m), dtype=np.float64)
    elif facts.sampler == "log_uniform":
        first = 0 if m <= 1 else math.ceil(math.log2(m))
        bucket = np.maximum(first, np.floor(np.log2(s + 1.0)).astype(np.int64))
        p = np.minimum(1.0, rate / np.exp2(bucket.astype(np.float64)))
    else:
        raise ValueError(f"reach: unknown sampler {facts.sampler!r}")
    p[s < int(facts.keep_first)] = 1.0
    return p


def scaling_of(facts: AttentionFacts, d: int) -> tuple[float, str]:
    """(tau, scaling_source): the recorded scaling, else 1/sqrt(d) said as 'default'."""
    if facts.scaling is not None and math.isfinite(facts.scaling) and facts.scaling > 0:
        return float(facts.scaling), "capture"
    return 1.0 / math.sqrt(d), "default"


def admissible_span(t: np.ndarray, window: int | None) -> np.ndarray:
    """(n,) D = the largest admissible distance of each query: min(t, W - 1) (t without window)."""
    t = np.asarray(t, dtype=np.int64)
    return t if window is None else np.minimum(t, int(window) - 1)


def uniform_bin_shares(span: np.ndarray, n_bins: int, m: int) -> np.ndarray:
    """(n, R) the share of the admissible distances 0..D of each query in bin r (uniform
    attention over positions, from positions alone)."""
    lo = np.arange(n_bins, dtype=np.int64) * m
    hi = np.minimum(lo + m - 1, span[:, None])
    count = np.clip(hi - lo + 1, 0, None)
    return count / (span[:, None] + 1.0)


@dataclass(frozen=True)
class QueryEstimates:
    """Per-query estimates of one head (n = queries used).

    index : (n,) int64 the q rows used;  mass : (n, R) float64;  distance, reach, far, sink,
    ess : (n,) float64 (far: NaN for queries before L_ctx / 2; sink: NaN when keep_first = 0)
    log_z : (n,) float64 log of the Horvitz-Thompson Z_i = sum_j exp(s_ij) / pi_j;  skipped : int
    """

    index: np.ndarray
    mass: np.ndarray
    distance: np.ndarray
    reach: np.ndarray
    far: np.ndarray
    sink: np.ndarray
    ess: np.ndarray
    log_z: np.ndarray
    skipped: int


@dataclass(frozen=True)
class KeyExamples:
    """The key rows of one head grouped by example (stable: each example's rows in file order).

    order : (n_k,) int64 the file rows in that order;  k : (n_k, d) float64 the key vectors;
    position, example : (n_k,) their positions (int64) and example ids.  They depend on the key
    rows alone: the query heads of one GQA group share them (``Analysis.shared``).
    """

    order: np.ndarray
    k: np.ndarray
    position: np.ndarray
    example: np.ndarray


def key_examples(head: HeadData) -> KeyExamples:
    """The :class:`KeyExamples` of ``head``'s key rows."""
    ke = np.asarray(head.k_example)
    order = np.argsort(ke, kind="stable")
    out = KeyExamples(
        order=order,
        k=np.asarray(np.asarray(head.k)[order], dtype=np.float64),
        position=np.asarray(head.k_pos, dtype=np.int64)[order],
        example=ke[order],
    )
    for a in (out.order, out.k, out.position, out.example):
        a.flags.writeable = False  # shared by the heads of a group
    return out


def query_estimates(
    head: HeadData, facts: AttentionFacts, keys: KeyExamples | None = None
) -> QueryEstimates:
    """The Horvitz-Thompson estimates of every query of ``head`` (module docstring); ``keys``:
    its :func:`key_examples` when already built.

    The scores of one example's queries against its keys are one product (in blocks of at most
    :data:`BLOCK_CELLS` cells); what follows from them is cell by cell or row by row, so it is
    carried through for many examples at once (up to about :data:`BLOCK_CELLS` cells), the row
    sums over the rows of the examples with the same number of keys together.
    """
    m, L = int(head.bucket_size), int(head.context_length)
    n_bins = max(1, -(-L // m))
    tau, _ = scaling_of(facts, head.d)
    cap = facts.softcap if facts.softcap is not None and facts.softcap > 0 else None
    sink_n = int(facts.keep_first)
    window = head.sliding_window
    half = L / 2.0

    t_all = np.asarray(head.q_pos, dtype=np.int64)
    qe = np.asarray(head.q_example)
    # queries and keys in example order (stable: each example's rows keep their file order)
    q_order = np.argsort(qe, kind="stable")
    q = np.asarray(np.asarray(head.q)[q_order], dtype=np.float64)  # (n_q, d)
    q_ex = qe[q_order]
    kx = keys if keys is not None else key_examples(head)
    k, k_ex, s_k = kx.k, kx.example, kx.position
    pi_k = keep_probability(s_k, facts)
    span_all = admissible_span(t_all, window)

    n_q = q.shape[0]
    used = np.zeros(n_q, dtype=bool)
    mass = np.zeros((n_q, n_bins))
    distance = np.full(n_q, np.nan)
    far = np.full(n_q, np.nan)
    sink = np.full(n_q, np.nan)
    ess = np.full(n_q, np.nan)
    log_z = np.full(n_q, np.nan)

    def estimate(pending: dict[int, list[tuple[int, int, int, np.ndarray]]]) -> None:
        """The estimates of the query rows of the pending blocks: n_c -> blocks, each (first and
        end row in example order, first key, q . k of those rows against the example's n_c
        keys).  The cells of every block are one flat array, row after row (each row its keys in
        example order), the groups of equal n_c one after another, so that a group's cells are
        an (N_g, n_c) array: the row sums are taken there, as on each block alone."""
        sizes = sorted(pending)
        blocks = [(a, b, lo, n_c) for n_c in sizes for a, b, lo, _ in pending[n_c]]
        bl = np.array(blocks, dtype=np.int64).reshape(-1, 4)
        nr = bl[:, 1] - bl[:, 0]  # rows per block
        n_rows = int(nr.sum())
        first_row = np.cumsum(nr) - nr
        qpos = np.repeat(bl[:, 0] - first_row, nr) + np.arange(n_rows)  # example-order q row
        row_nc = np.repeat(bl[:, 3], nr)
        first_cell = np.cumsum(row_nc) - row_nc
        n_cells = int(row_nc.sum())
        cell_row = np.repeat(np.arange(n_rows), row_nc)
        kidx = np.repeat(np.repeat(bl[:, 2], nr) - first_cell, row_nc) + np.arange(n_cells)
        # the groups: rows [r0, r1) and cells [c0, c1) of each n_c
        g_rows = [sum(b - a for a, b, _, _ in pending[n_c]) for n_c in sizes]
        bounds, r0, c0 = [], 0, 0
        for n_c, g in zip(sizes, g_rows):
            bounds.append((r0, r0 + g, c0, c0 + g * n_c, n_c))
            r0, c0 = r0 + g, c0 + g * n_c

        def row_sums(cells: np.ndarray, reduce: str = "sum") -> np.ndarray:
            out = np.empty(n_rows, dtype=cells.dtype)
            for a, b, c, e, n_c in bounds:
                out[a:b] = getattr(cells[c:e].reshape(b - a, n_c), reduce)(axis=1)
            return out

        r = q_order[qpos]  # the q rows (file order indices)
        ks, kpi = s_k[kidx], pi_k[kidx]
        t = t_all[r]
        delta = t[cell_row] - ks
        ok = delta >= 0
        if window is not None:
            ok &= delta < int(window)
        score = tau * np.concatenate([p.ravel() for n_c in sizes for *_, p in pending[n_c]])
        if cap is not None:
            score = cap * np.tanh(score / cap)
        score = np.where(ok, score, -np.inf)
        top = row_sums(score, "max")
        has = np.isfinite(top) & (span_all[r] > 0)
        if not has.any():
            return
        # rows without an admissible kept key (not has) give NaN here and are not written
        with np.errstate(invalid="ignore", divide="ignore"):
            w = np.where(ok, np.exp(score - top[cell_row]), 0.0) / kpi
            zi = row_sums(w)
            share = w / zi[cell_row]
            dbin = np.minimum(np.maximum(delta // m, 0), n_bins - 1)  # integers: np.clip's
            sel = ok & has[cell_row]
            bins = np.bincount(
                (cell_row * n_bins + dbin)[sel], weights=share[sel], minlength=n_rows * n_bins
            ).reshape(n_rows, n_bins)
            dist_i = row_sums(share * np.where(ok, delta, 0))
            far_i = row_sums(share * (delta >= half))
            sink_i = row_sums(share * (ks < sink_n)) if sink_n > 0 else None
            ess_i = zi**2 / row_sums(w**2)
            log_z_i = np.log(zi) + top
        rr = r[has]
        mass[rr] = bins[has]
        distance[rr] = dist_i[has]
        far[rr] = np.where(t >= half, far_i, np.nan)[has]
        if sink_i is not None:
            sink[rr] = sink_i[has]
        ess[rr] = ess_i[has]
        log_z[rr] = log_z_i[has]
        used[rr] = True

    # examples: [start, end) of their rows in example order, queries and keys
    examples = np.unique(q_ex)
    q_lo = np.searchsorted(q_ex, examples, side="left")
    q_hi = np.searchsorted(q_ex, examples, side="right")
    k_lo = np.searchsorted(k_ex, examples, side="left")
    k_hi = np.searchsorted(k_ex, examples, side="right")
    pending: dict[int, list[tuple[int, int, int, np.ndarray]]] = {}  # n_c -> its blocks
    cells = 0  # in the pending blocks: at most about BLOCK_CELLS

    def flush() -> None:
        if pending:
            estimate(pending)
        pending.clear()

    for a0, a1, lo, hi in zip(q_lo.tolist(), q_hi.tolist(), k_lo.tolist(), k_hi.tolist()):
        n_c = hi - lo
        if n_c == 0:
            continue
        kv_t = k[lo:hi].T
        step = max(1, BLOCK_CELLS // n_c)
        for b0 in range(a0, a1, step):
            b1 = min(b0 + step, a1)
            if cells + (b1 - b0) * n_c > BLOCK_CELLS:
                flush()
                cells = 0
            pending.setdefault(n_c, []).append((b0, b1, lo, q[b0:b1] @ kv_t))
            cells += (b1 - b0) * n_c
    flush()

    idx = np.flatnonzero(used)
    uniform = admissible_span(t_all[idx], window) / 2.0
    return QueryEstimates(
        index=idx,
        mass=mass[idx],
        distance=distance[idx],
        reach=distance[idx] / uniform,
        far=far[idx],
        sink=sink[idx],
        ess=ess[idx],
        log_z=log_z[idx],
        skipped=int(n_q - idx.size),
    )


def _mean(x: np.ndarray) -> float:
    x = np.asarray(x, dtype=np.float64)
    x = x[np.isfinite(x)]
    return float(x.mean()) if x.size else float("nan")


def run(
    head: HeadData, params: ReachParams, *, seed: int = 0, shared: Any = None
) -> AnalysisResult:
    """``reach_buckets`` and ``reach_heads`` of one head (module docstring).

    Raises ``ValueError`` when the head's model has no sampler facts (``head.attention``)."""
    facts = head.attention
    if facts is None:
        raise ValueError(
            "reach: the capture's sampler facts (sampler, bucket size, base rate) of this head's "
            "model are unknown; the analysis is not run without them"
        )
    _, source = scaling_of(facts, head.d)
    est = query_estimates(head, facts, (shared or {}).get("key_examples"))
    m, L = int(head.bucket_size), int(head.context_length)
    n_bins = est.mass.shape[1]
    idx = est.index
    t = np.asarray(head.q_pos, dtype=np.int64)[idx]
    qb = np.asarray(head.q_bucket, dtype=np.int64)[idx]
    span = admissible_span(t, head.sliding_window)
    shares = uniform_bin_shares(span, n_bins, m)

    exact = head.exact
    ex_bins: np.ndarray | None = None
    if exact is not None:
        eb = np.asarray(exact.bins, dtype=np.float64)[idx]
        ex_bins = np.full((idx.size, n_bins), np.nan)
        w = min(n_bins, eb.shape[1]) if eb.ndim == 2 else 0
        ex_bins[:, :w] = eb[:, :w]

    out_b: dict[str, list] = {c: [] for c in ("q_bucket", "distance_bin", "n_queries")}
    mass_rows, uni_rows, exact_rows = [], [], []
    for b in np.unique(qb):
        sel = qb == b
        r_max = min(n_bins - 1, int((t[sel] // m).max()))
        n = int(sel.sum())
        out_b["q_bucket"] += [int(b)] * (r_max + 1)
        out_b["distance_bin"] += list(range(r_max + 1))
        out_b["n_queries"] += [n] * (r_max + 1)
        mass_rows.append(est.mass[sel, : r_max + 1].mean(axis=0))
        uni_rows.append(shares[sel, : r_max + 1].mean(axis=0))
        if ex_bins is not None:
            exact_rows.append(
                np.array([_mean(ex_bins[sel, r]) for r in range(r_max + 1)], dtype=np.float64)
            )
        else:
            exact_rows.append(np.full(r_max + 1, np.nan))
    cat = (lambda xs: np.concatenate(xs)) if mass_rows else (lambda xs: np.empty(0))
    mass_col, uni_col, exact_col = cat(mass_rows), cat(uni_rows), cat(exact_rows)
    with np.errstate(divide="ignore", invalid="ignore"):
        lift = np.where(uni_col > 0, mass_col / np.where(uni_col > 0, uni_col, 1.0), np.nan)
    result = AnalysisResult()
    result.add(
        BUCKETS,
        {
            "q_bucket": np.asarray(out_b["q_bucket"], dtype=np.int32),
            "distance_bin": np.asarray(out_b["distance_bin"], dtype=np.int32),
            "n_queries": np.asarray(out_b["n_queries"], dtype=np.int32),
            "mass": mass_col,
            "uniform_mass": uni_col,
            "lift": lift,
            "mass_exact": exact_col,
        },
    )

    edge = float(params.edge_fraction)
    first = _mean(est.reach[t < edge * L])
    last = _mean(est.reach[t >= (1.0 - edge) * L])
    reach_exact = sink_exact = entropy_exact = float("nan")
    if exact is not None and idx.size:
        reach_exact = _mean(np.asarray(exact.distance, dtype=np.float64)[idx] / (span / 2.0))
        sink_exact = _mean(np.asarray(exact.sink, dtype=np.float64)[idx])
        entropy_exact = _mean(np.asarray(exact.entropy, dtype=np.float64)[idx])
    result.add(
        HEADS,
        {
            "reach": np.array([_mean(est.reach)]),
            "reach_first_20pct": np.array([first]),
            "reach_last_20pct": np.array([last]),
            "reach_drop": np.array([first - last]),
            "local_mass": np.array([_mean(est.mass[:, 0]) if idx.size else float("nan")]),
            "far_mass": np.array([_mean(est.far)]),
            "sink_mass": np.array([_mean(est.sink)]),
            "mean_ess": np.array([_mean(est.ess)]),
            "n_queries_used": np.array([idx.size], dtype=np.int32),
            "n_queries_skipped": np.array([est.skipped], dtype=np.int32),
            "scaling_source": np.array([source], dtype=object),
            "reach_exact": np.array([reach_exact]),
            "sink_mass_exact": np.array([sink_exact]),
            "entropy_exact": np.array([entropy_exact]),
        },
    )
    return result


# ---------------------------------------------------------------------------------------------
# estimator quality: subsample a head captured with every key kept, compare with the exact
# ---------------------------------------------------------------------------------------------
def subsample(head: HeadData, facts: AttentionFacts, rng: np.random.Generator) -> HeadData:
    """A copy of ``head`` with its q rows and k rows kept independently with the keep
    probability of ``facts`` (as a capture with that sampler would have kept them); the exact
    columns follow their q rows.  ``head`` is typically a capture with every key kept."""
    keep_q = rng.random(len(head.q_pos)) < keep_probability(head.q_pos, facts)
    keep_k = rng.random(len(head.k_pos)) < keep_probability(head.k_pos, facts)
    return head.select(keep_q, keep_k, attention=facts)


#: head metrics compared by :func:`estimate_errors`
QUALITY_METRICS = ("reach", "local_mass", "far_mass", "sink_mass")


def estimate_errors(
    head: HeadData,
    facts: AttentionFacts,
    *,
    draws: int,
    rng: np.random.Generator,
    params: ReachParams | None = None,
) -> dict[str, np.ndarray]:
    """Estimate minus exact over ``draws`` subsamples of ``head`` (which must carry exact
    columns), on the very queries each estimate used.

    Returns ``<metric>`` (draws,) float64 for each of :data:`QUALITY_METRICS` (NaN where a draw
    has no value, e.g. sink_mass without keep_first) and ``bins`` (draws, R) float64: the
    error of the mean mass per distance bin r over the draw's used queries that reach bin r.
    """
    if head.exact is None:
        raise ValueError("reach: estimate_errors needs a head with exact attention columns")
    params = params or ReachParams()
    m, L = int(head.bucket_size), int(head.context_length)
    out: dict[str, list] = {k: [] for k in (*QUALITY_METRICS, "bins")}
    for _ in range(draws):
        sub = subsample(head, facts, rng)
        est = query_estimates(sub, facts)
        assert sub.exact is not None
        idx = est.index
        t = sub.q_pos[idx]
        ex_bins = np.asarray(sub.exact.bins, dtype=np.float64)[idx]
        n_bins = min(est.mass.shape[1], ex_bins.shape[1])
        span = admissible_span(t, sub.sliding_window)
        exact = {
            "reach": _mean(np.asarray(sub.exact.distance)[idx] / (span / 2.0)),
            "local_mass": _mean(ex_bins[:, 0]) if idx.size else np.nan,
            "far_mass": _mean(ex_bins[t >= L / 2, (L // 2) // m :].sum(axis=1)),
            "sink_mass": _mean(np.asarray(sub.exact.sink)[idx]),
        }
        got = {
            "reach": _mean(est.reach),
            "local_mass": _mean(est.mass[:, 0]) if idx.size else np.nan,
            "far_mass": _mean(est.far),
            "sink_mass": _mean(est.sink),
        }
        for k in QUALITY_METRICS:
            out[k].append(got[k] - exact[k])
        row = np.full(est.mass.shape[1], np.nan)
        reach_bin = t // m  # a query reaches bins 0 .. floor(t / m)
        for r in range(n_bins):
            sel = reach_bin >= r
            if sel.any():
                row[r] = est.mass[sel, r].mean() - ex_bins[sel, r].mean()
        out["bins"].append(row)
    return {k: np.asarray(v, dtype=np.float64) for k, v in out.items()}
