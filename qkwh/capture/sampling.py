"""Which rows a capture keeps: example ids, position buckets, sampling masks and head sampling.

These rules reproduce the public capture protocol bit for bit, so a new capture is comparable with
the published ones:

* example ids: a source id is normalised to a signed 64-bit integer (integers kept, integral
  floats converted, anything else hashed with 8-byte blake2b of ``str(value)``); that int64 seeds
  the masks, and the stored ``example_id`` column is its int32 wrap-around;
* buckets: ``uniform`` and ``all`` use ``position // m``; ``log_uniform`` uses
  ``max(P, floor(log2(position + 1)))`` with ``P = ceil(log2 m)``;
* masks: one Bernoulli draw per position from a torch CPU generator seeded with
  :func:`batch_seed` ``(example_id, layer, kind)`` (SplitMix64-mixed), shared by every head of that
  layer and kind; Q and K therefore keep independent positions;
* heads: ``random.Random(seed).sample`` over the (layer, q_head) pairs of the candidate layers,
  key heads by the GQA rule ``k_head = q_head // (n_q / n_kv)``.

Only :func:`keep_mask` needs torch (the generator is torch's); everything else is plain Python.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

SAMPLERS = ("uniform", "log_uniform", "all")

_U64 = 0xFFFFFFFFFFFFFFFF
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_SEED_INIT = 0x243F6A8885A308D3


# ---------------------------------------------------------------------------------------------
# example ids
# ---------------------------------------------------------------------------------------------
def _hash_id(value: Any) -> int:
    unsigned = int.from_bytes(
        hashlib.blake2b(str(value).encode("utf-8"), digest_size=8).digest(), "little"
    )
    return unsigned - (1 << 64) if unsigned > _INT64_MAX else unsigned


def normalize_example_id(value: Any) -> int:
    """A source id as the signed 64-bit integer that seeds the sampling masks."""
    if isinstance(value, bool):
        return int(value)
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        try:
            value = value.item()
        except (TypeError, ValueError):
            pass
    if isinstance(value, int):
        return value if _INT64_MIN <= value <= _INT64_MAX else _hash_id(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return _hash_id(value)


def stored_example_id(example_id: int) -> int:
    """The int32 value written to the ``example_id`` column (two's-complement wrap-around)."""
    return int(np.array([example_id], dtype=np.int64).astype(np.int32)[0])


# ---------------------------------------------------------------------------------------------
# seeds
# ---------------------------------------------------------------------------------------------
def mix64(value: int) -> int:
    """SplitMix64 finaliser of a 64-bit integer (negative values taken modulo 2**64)."""
    value &= _U64
    value ^= value >> 30
    value = (value * 0xBF58476D1CE4E5B9) & _U64
    value ^= value >> 27
    value = (value * 0x94D049BB133111EB) & _U64
    value ^= value >> 31
    return value


def _combine(seed: int, value: int) -> int:
    seed ^= value
    seed = (seed * 0x9E3779B97F4A7C15) & _U64
    seed ^= seed >> 32
    return seed & _U64


def batch_seed(example_id: int, layer: int, kind: str) -> int:
    """Seed of the mask shared by all heads of one (example, layer, kind); unsigned 64-bit."""
    seed = _SEED_INIT
    for value in (mix64(int(example_id)), mix64(int(layer)), mix64(ord(kind[0]) & 0xFF)):
        seed = _combine(seed, value)
    return seed


# ---------------------------------------------------------------------------------------------
# buckets and masks
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SamplerSpec:
    """Position sampler: ``strategy`` in :data:`SAMPLERS`, ``bucket_size`` m (tokens), ``base_rate``
    (expected kept tokens per bucket per example for uniform/log_uniform)."""

    strategy: str = "uniform"
    bucket_size: int = 512
    base_rate: float = 1.0
    keep_first: int = 0  # positions below it are kept with probability 1 (q and k alike)

    def __post_init__(self) -> None:
        if self.strategy not in SAMPLERS:
            raise ValueError(f"sampler must be one of {', '.join(SAMPLERS)}, not {self.strategy!r}")
        if int(self.bucket_size) < 1:
            raise ValueError(f"bucket size must be at least 1 token, not {self.bucket_size}")
        if not (self.base_rate > 0 and math.isfinite(self.base_rate)):
            raise ValueError(f"base rate must be a positive number, not {self.base_rate}")
        if int(self.keep_first) < 0:
            raise ValueError(f"keep-first must be at least 0, not {self.keep_first}")

    @property
    def min_bucket_power(self) -> int:
        """P = ceil(log2 m) (0 for m = 1): the first log bucket id."""
        return 0 if self.bucket_size <= 1 else int(math.ceil(math.log2(self.bucket_size)))

    @property
    def effective_bucket_size(self) -> int:
        """m for uniform/all; 2**P for log_uniform (the sniffer rounds m up to a power of two)."""
        return (
            (1 << self.min_bucket_power)
            if self.strategy == "log_uniform"
            else int(self.bucket_size)
        )

    @property
    def keep_probability(self) -> float | None:
        """Per-position keep probability (None for log_uniform, where it depends on the bucket)."""
        if self.strategy == "all":
            return 1.0
        if self.strategy == "uniform":
            return min(1.0, float(self.base_rate) / float(self.bucket_size))
        return None

    def bucket_of(self, position: np.ndarray) -> np.ndarray:
        """int64 bucket id of each position (exact integer arithmetic)."""
        pos = np.asarray(position, dtype=np.int64)
        if self.strategy == "log_uniform":
            # floor(log2(p + 1)) as the binary exponent of p + 1: exact for any position (the
            # reference computes it in float32, which agrees below 2**21 tokens)
            return np.maximum(
                np.frexp((pos + 1).astype(np.float64))[1].astype(np.int64) - 1,
                self.min_bucket_power,
            )
        return pos // int(self.bucket_size)

    def metadata(self) -> dict[str, Any]:
        """Sampler keys of the dataset metadata."""
        out: dict[str, Any] = {
            "sampling_strategy": self.strategy,
            "sampling_base_rate": float(self.base_rate),
        }
        if self.strategy == "log_uniform":
            out["sampling_min_bucket_size"] = self.effective_bucket_size
        else:
            out["sampling_bucket_size"] = int(self.bucket_size)
            out["sampling_keep_probability"] = self.keep_probability
        if self.keep_first:
            out["sampling_keep_first"] = int(self.keep_first)
        return out


def keep_mask(
    spec: SamplerSpec, *, example_id: int, layer: int, kind: str, seq_len: int
) -> np.ndarray:
    """(seq_len,) bool: the positions kept for one (example, layer, kind), shared by all its heads.

    ``example_id`` is the normalised int64 id (:func:`normalize_example_id`), not the int32 column.
    """
    if spec.strategy == "all":
        return np.ones(int(seq_len), dtype=bool)
    if spec.keep_first:
        mask = keep_mask(
            dataclasses.replace(spec, keep_first=0),
            example_id=example_id,
            layer=layer,
            kind=kind,
            seq_len=seq_len,
        )
        mask[: int(spec.keep_first)] = True
        return mask
    import torch

    gen = torch.Generator(device="cpu")
    gen.manual_seed(batch_seed(example_id, layer, kind))
    rand = torch.rand(int(seq_len), generator=gen, device="cpu", dtype=torch.float32)
    if spec.strategy == "uniform":
        return (rand < spec.keep_probability).numpy()
    # float32 arithmetic, like the reference sampler: min(1, base_rate / 2**bucket)
    bucket = torch.from_numpy(spec.bucket_of(np.arange(int(seq_len)))).to(torch.float32)
    denom = torch.clamp(torch.pow(2.0, bucket), min=1.0)
    prob = torch.minimum(
        torch.ones_like(denom), torch.tensor(float(spec.base_rate), dtype=torch.float32) / denom
    )
    return (rand < prob).numpy()


# ---------------------------------------------------------------------------------------------
# heads
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class HeadSelection:
    """The sampled heads of a capture.

    query_heads / key_heads : layer -> sorted head indices (key heads by the GQA rule)
    sliding_layers : layers whose attention uses a sliding window (from the model config)
    metadata : the ``head_sampling_*`` keys of the dataset metadata
    """

    query_heads: dict[int, tuple[int, ...]]
    key_heads: dict[int, tuple[int, ...]]
    sliding_layers: frozenset[int] = field(default_factory=frozenset)
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def layers(self) -> tuple[int, ...]:
        return tuple(sorted(self.query_heads))

    def configs(self) -> list[tuple[int, int, str]]:
        """Every (layer, head, kind) file this selection may write, in layer order."""
        out = []
        for layer in self.layers:
            out += [(layer, h, "q") for h in self.query_heads[layer]]
            out += [(layer, h, "k") for h in self.key_heads[layer]]
        return out


def select_heads(
    *,
    num_layers: int,
    num_query_heads: int,
    num_key_heads: int,
    count: int,
    seed: int,
    sliding_layers: Iterable[int] = (),
    full_attention_only: bool = True,
) -> HeadSelection:
    """Sample ``count`` query heads (all when there are fewer candidates).

    Candidates are every (layer, q_head), layer-major, minus the sliding-window layers when
    ``full_attention_only``.  Raises ValueError on an impossible layout or no candidates.
    """
    if num_layers < 1 or num_query_heads < 1 or num_key_heads < 1:
        raise ValueError(
            f"model has {num_layers} layers, {num_query_heads} query heads, {num_key_heads} key heads"
        )
    if num_query_heads % num_key_heads:
        raise ValueError(
            f"{num_query_heads} query heads are not a multiple of {num_key_heads} key/value heads"
        )
    if count < 1:
        raise ValueError(f"head count must be at least 1, not {count}")
    sliding = frozenset(int(s) for s in sliding_layers)
    candidates: list[tuple[int, int]] = []
    excluded = 0
    for layer in range(num_layers):
        for head in range(num_query_heads):
            if full_attention_only and layer in sliding:
                excluded += 1
                continue
            candidates.append((layer, head))
    if not candidates:
        raise ValueError(
            "no candidate heads: every layer uses sliding-window attention (use --include-sliding)"
        )
    selected: Sequence[tuple[int, int]]
    if count >= len(candidates):
        selected = list(candidates)
    else:
        selected = random.Random(int(seed)).sample(candidates, int(count))
    ratio = num_query_heads // num_key_heads
    q: dict[int, set[int]] = {}
    k: dict[int, set[int]] = {}
    for layer, head in selected:
        q.setdefault(layer, set()).add(head)
        k.setdefault(layer, set()).add(head // ratio)
    metadata = {
        "head_sampling_strategy": "random_query",
        "head_sampling_seed": int(seed),
        "head_sampling_requested_query_heads": int(count),
        "head_sampling_selected_query_heads": len(selected),
        "head_sampling_selected_key_heads": sum(len(v) for v in k.values()),
        "head_sampling_num_layers": int(num_layers),
        "head_sampling_num_query_heads": int(num_query_heads),
        "head_sampling_num_key_heads": int(num_key_heads),
        "head_sampling_full_attention_only": int(bool(full_attention_only)),
        "head_sampling_sliding_layer_count": len(sliding),
        "head_sampling_full_layer_count": int(num_layers) - len(sliding),
        "head_sampling_sliding_candidates_excluded": excluded,
    }
    return HeadSelection(
        query_heads={layer: tuple(sorted(v)) for layer, v in sorted(q.items())},
        key_heads={layer: tuple(sorted(v)) for layer, v in sorted(k.items())},
        sliding_layers=sliding,
        metadata=metadata,
    )
