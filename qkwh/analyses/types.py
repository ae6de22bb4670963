"""Inputs and outputs shared by the pure analyses.

Every analysis takes a :class:`HeadData` (numpy arrays of one head's q rows and its GQA-mapped
k rows) plus its frozen parameter object from :mod:`qkwh.params`, and returns a
:class:`AnalysisResult`: a mapping from a warehouse table name (docs/tables.md#per-head-results)
to the columns of the rows it contributes for that head.  Column names are the warehouse's; the
head key (model_id, layer, q_head, k_head) and ``config_id`` are added by the compute layer, never here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # numpy is imported where arrays are made: a no-op `qkwh compute` needs none
    import numpy as np


@dataclass(frozen=True)
class RopePlanes:
    """The RoPE planes of one model layer, from the warehouse catalog ``rope_frequencies``
    (docs/tables.md), one entry per plane (rotated planes first, then one per unrotated dim).

    Attributes
    ----------
    plane, dim_a : (P,) int64 plane numbers and first dims
    dim_b : (P,) int64 second dims, -1 for an unrotated width-1 plane
    inv_freq : (P,) float64 radians per token (0 when unrotated)
    wavelength : (P,) float64 tokens (+inf when unrotated)
    band : (P,) object array of 'high' | 'mid' | 'low' | 'unrotated', as the catalog records it
    layout : 'half' | 'interleaved', the layout the catalog's dims follow
    source : where the frequencies came from: 'capture' (the layout was recorded by the capture),
        'config' or 'rope_theta' (the layout was assumed)
    """

    plane: np.ndarray
    dim_a: np.ndarray
    dim_b: np.ndarray
    inv_freq: np.ndarray
    wavelength: np.ndarray
    band: np.ndarray
    layout: str = "half"
    source: str = "capture"


@dataclass(frozen=True)
class AttentionFacts:
    """What the softmax of a head needs beyond its vectors (the ``reach`` analysis,
    docs/metrics/reach.md): the capture's sampler facts and the model's attention scaling.

    Attributes
    ----------
    sampler : 'uniform' | 'log_uniform' | 'all', the capture's position sampler
    sampler_bucket_size : m of the sampler (the min bucket size for 'log_uniform'), tokens
    base_rate : the sampler's base rate (keep probability min(1, base_rate / m) or
        min(1, base_rate / 2^bucket)); unused by 'all'
    keep_first : S, positions below it were kept with probability 1 (0 when not recorded)
    scaling : tau, the score is tau * q.k; None = unknown (1/sqrt(d) is used and said)
    softcap : c, the logit soft-cap c * tanh(s / c), None without
    """

    sampler: str
    sampler_bucket_size: int
    base_rate: float
    keep_first: int = 0
    scaling: float | None = None
    softcap: float | None = None


@dataclass(frozen=True)
class ExactAttention:
    """The model's own attention of each query row, recorded at capture (optional q-file
    columns, docs/input-format.md).  Rows align with ``HeadData.q``; NaN where a row has none.

    bins : (n_q, R) float64 mass per distance bin floor((t - s) / m)
    distance : (n_q,) float64 mean distance t - s under the attention, tokens
    entropy : (n_q,) float64 entropy of the attention, nats
    sink : (n_q,) float64 mass on positions < 4
    """

    bins: np.ndarray
    distance: np.ndarray
    entropy: np.ndarray
    sink: np.ndarray

    def take(self, idx: np.ndarray | None) -> ExactAttention:
        if idx is None:
            return self
        return ExactAttention(self.bins[idx], self.distance[idx], self.entropy[idx], self.sink[idx])


@dataclass(frozen=True)
class HeadData:
    """One analysed head: Q (n_q x d) and K (n_k x d) with their row metadata.

    Attributes
    ----------
    q : (n_q, d) float array (float32 on disk; analyses accumulate in float64)
    q_pos, q_example, q_bucket : (n_q,) int arrays: position t_i, example e_i, bucket b_i
    k : (n_k, d) float array
    k_pos, k_example, k_bucket : (n_k,) int arrays: position s_j, example e_j, bucket c_j
    context_length : L_ctx in tokens (docs/input-format.md#which-model-and-its-facts)
    bucket_size : capture bucket size m in tokens
    sliding_window : window in tokens, or None for full attention
    layer, q_head : only used to derive seeds (docs/README.md#parameters-and-modes), never for I/O
    rope : the :class:`RopePlanes` of the head's layer, or None when unknown (read by the
        ``rope`` analysis only)
    attention : the :class:`AttentionFacts` of the head's model, or None when unknown (read by
        the ``reach`` analysis only)
    exact : the :class:`ExactAttention` of the q rows, or None when the capture did not record it
    """

    q: np.ndarray
    q_pos: np.ndarray
    q_example: np.ndarray
    q_bucket: np.ndarray
    k: np.ndarray
    k_pos: np.ndarray
    k_example: np.ndarray
    k_bucket: np.ndarray
    context_length: int
    bucket_size: int
    sliding_window: int | None = None
    layer: int = 0
    q_head: int = 0
    rope: RopePlanes | None = None
    attention: AttentionFacts | None = None
    exact: ExactAttention | None = None

    @property
    def d(self) -> int:
        return int(self.q.shape[1])

    def select(self, keep_q: np.ndarray, keep_k: np.ndarray, **changes: Any) -> HeadData:
        """The head with only the q rows where ``keep_q`` (bool, n_q) and the k rows where
        ``keep_k`` (bool, n_k) are true, row order kept; the exact columns follow their q rows.
        ``changes`` replace other fields (as :func:`dataclasses.replace`)."""
        import numpy as np

        exact = None if self.exact is None else self.exact.take(np.flatnonzero(keep_q))
        return dataclasses.replace(
            self,
            q=self.q[keep_q],
            q_pos=self.q_pos[keep_q],
            q_example=self.q_example[keep_q],
            q_bucket=self.q_bucket[keep_q],
            k=self.k[keep_k],
            k_pos=self.k_pos[keep_k],
            k_example=self.k_example[keep_k],
            k_bucket=self.k_bucket[keep_k],
            **{"exact": exact, **changes},
        )


# table name -> column name -> 1-D array (all columns of one table have equal length)
Columns = dict[str, "np.ndarray"]


@dataclass
class AnalysisResult:
    """Rows one analysis produces for one head, keyed by warehouse table name."""

    tables: dict[str, Columns] = field(default_factory=dict)

    def add(self, table: str, columns: Columns) -> None:
        import numpy as np

        lengths = {len(np.atleast_1d(v)) for v in columns.values()}
        if len(lengths) > 1:
            raise ValueError(f"columns of {table} have different lengths: {sorted(lengths)}")
        self.tables[table] = {k: np.atleast_1d(v) for k, v in columns.items()}
