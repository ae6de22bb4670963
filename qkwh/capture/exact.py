"""The model's own attention of the kept query rows, computed at capture (docs/input-format.md,
optional q-file columns ``attn_bins``, ``attn_distance``, ``attn_entropy``, ``attn_sink``).

For every kept query row of a captured head, the softmax over *all* its admissible keys of the
forward pass (the full key tensor, not the sampled keys), with the attention module's own
scaling, soft-cap and sliding window:

* score = scaling * q . k, soft-capped as c * tanh(score / c) when the module has a soft-cap;
* admissible keys of the query at t: positions s <= t, and t - s < W with a sliding window W;
* ``attn_bins`` (list<float32>): the probability mass in each distance bin r = floor((t - s) / m),
  r = 0 .. ceil(L / m) - 1 (m = bucket size, L = the capture's max length);
* ``attn_distance``: the mean of t - s; ``attn_entropy``: the entropy in nats;
* ``attn_sink``: the mass on positions < 4.

torch is imported lazily; the reductions are done in float64.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # numpy where the columns are made: the saver-state keys below need none
    import numpy as np

#: saver-state keys (``_saver_state.json`` model_metadata) of the captured layers' softmax
SCALE_KEY = "attention_score_scale"
SOFTCAP_KEY = "attention_logit_softcap"
#: the columns this module writes on q files, in order
COLUMNS = ("attn_bins", "attn_distance", "attn_entropy", "attn_sink")
#: positions counted as the attention sink in ``attn_sink``
SINK_POSITIONS = 4
#: (query, key) cells per block (bounds the float64 temporaries)
BLOCK_CELLS = 1 << 22


@dataclass(frozen=True)
class LayerAttention:
    """What a layer's attention call says about its softmax: scaling, soft-cap, window."""

    scaling: float
    softcap: float | None
    sliding_window: int | None


def layer_attention(module: Any, kwargs: dict[str, Any], head_dim: int) -> LayerAttention:
    """The scaling, soft-cap and sliding window an attention call uses (the keyword arguments
    transformers' attention modules pass to their attention function, else the module's own
    attributes; the scaling falls back to 1/sqrt(d) as the eager implementation does)."""
    scaling = kwargs.get("scaling")
    if scaling is None:
        scaling = getattr(module, "scaling", None)
    if scaling is None:
        scaling = head_dim**-0.5
    softcap = kwargs.get("softcap")
    if softcap is None:
        softcap = getattr(module, "attn_logit_softcapping", None)
    window = kwargs.get("sliding_window")
    return LayerAttention(
        float(scaling),
        float(softcap) if softcap else None,
        int(window) if window else None,
    )


def exact_attention(
    query: Any,
    key: Any,
    positions: np.ndarray,
    *,
    attention: LayerAttention,
    bucket_size: int,
    n_bins: int,
) -> dict[str, np.ndarray]:
    """The exact attention of kept query rows.

    query : (H, T, d) torch tensor, the heads' queries at every position of the forward pass
    key : (H, T, d) torch tensor, each head's (GQA-mapped) keys at every position
    positions : (K,) int64 the kept query positions

    Returns ``attn_bins`` (H, K, n_bins) float32 and ``attn_distance``, ``attn_entropy``,
    ``attn_sink`` (H, K) float32.
    """
    import numpy as np
    import torch

    pos = np.asarray(positions, dtype=np.int64)
    h, t_len = int(query.shape[0]), int(key.shape[1])
    k_all = key.detach().to(dtype=torch.float64)
    s = torch.arange(t_len, dtype=torch.int64)
    out = {
        "attn_bins": np.zeros((h, pos.size, n_bins), dtype=np.float32),
        "attn_distance": np.zeros((h, pos.size), dtype=np.float32),
        "attn_entropy": np.zeros((h, pos.size), dtype=np.float32),
        "attn_sink": np.zeros((h, pos.size), dtype=np.float32),
    }
    step = max(1, BLOCK_CELLS // max(1, h * t_len))
    for b0 in range(0, pos.size, step):
        p = torch.from_numpy(pos[b0 : b0 + step])
        q = query.detach().to(dtype=torch.float64).index_select(1, p)  # (H, B, d)
        score = attention.scaling * torch.matmul(q, k_all.transpose(1, 2))  # (H, B, T)
        if attention.softcap is not None:
            score = attention.softcap * torch.tanh(score / attention.softcap)
        delta = p[:, None] - s[None, :]  # (B, T)
        ok = delta >= 0
        if attention.sliding_window is not None:
            ok &= delta < attention.sliding_window
        score = score.masked_fill(~ok[None], float("-inf"))
        prob = torch.softmax(score, dim=-1)
        logp = torch.log_softmax(score, dim=-1).masked_fill(~ok[None], 0.0)
        dist = delta.clamp(min=0).to(torch.float64)
        dbin = (delta.clamp(min=0) // int(bucket_size)).clamp(max=n_bins - 1)
        bins = torch.zeros((h, p.numel(), n_bins), dtype=torch.float64)
        bins.scatter_add_(2, dbin[None].expand(h, -1, -1), prob)
        sl = slice(b0, b0 + p.numel())
        out["attn_bins"][:, sl] = bins.numpy()
        out["attn_distance"][:, sl] = (prob * dist[None]).sum(-1).numpy()
        out["attn_entropy"][:, sl] = (-(prob * logp).sum(-1)).numpy()
        out["attn_sink"][:, sl] = prob[..., :SINK_POSITIONS].sum(-1).numpy()
    return out


def arrow_columns(exact: dict[str, np.ndarray] | None, n: int, n_bins: int) -> dict[str, Any]:
    """The four columns as Arrow arrays of ``n`` rows (all null when ``exact`` is None)."""
    import numpy as np
    import pyarrow as pa

    if exact is None:
        return {
            "attn_bins": pa.nulls(n, type=pa.list_(pa.float32())),
            "attn_distance": pa.nulls(n, type=pa.float32()),
            "attn_entropy": pa.nulls(n, type=pa.float32()),
            "attn_sink": pa.nulls(n, type=pa.float32()),
        }
    bins = np.ascontiguousarray(exact["attn_bins"], dtype=np.float32).reshape(n, n_bins)
    offsets = pa.array(np.arange(n + 1, dtype=np.int32) * n_bins)
    return {
        "attn_bins": pa.ListArray.from_arrays(offsets, pa.array(bins.reshape(-1))),
        "attn_distance": pa.array(np.asarray(exact["attn_distance"], dtype=np.float32)),
        "attn_entropy": pa.array(np.asarray(exact["attn_entropy"], dtype=np.float32)),
        "attn_sink": pa.array(np.asarray(exact["attn_sink"], dtype=np.float32)),
    }


def config_metadata(cfg: Any) -> dict[str, Any]:
    """``original_max_position_embeddings`` of a model config whose rope scaling extends its
    context (the trained context of docs/metrics/reach.md), found in ``rope_parameters`` /
    ``rope_scaling`` or on the config itself; empty when it has none."""
    found = []
    for params in (getattr(cfg, "rope_parameters", None), getattr(cfg, "rope_scaling", None)):
        if isinstance(params, dict):
            found.append(params.get("original_max_position_embeddings"))
            found += [
                v.get("original_max_position_embeddings")
                for v in params.values()
                if isinstance(v, dict)
            ]
    found.append(getattr(cfg, "original_max_position_embeddings", None))
    values = [int(v) for v in found if isinstance(v, (int, float)) and v > 0]
    return {"original_max_position_embeddings": min(values)} if values else {}


def schema_fields() -> list[tuple[str, Any]]:
    import pyarrow as pa

    return [
        ("attn_bins", pa.list_(pa.float32())),
        ("attn_distance", pa.float32()),
        ("attn_entropy", pa.float32()),
        ("attn_sink", pa.float32()),
    ]
