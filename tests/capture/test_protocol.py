"""The sampling rules of the public capture protocol: position masks (bit-exact against the
embedded sample, Poisson bounds per bucket, Q and K independent, shared across heads), head
sampling and example ids."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from capture_helpers import need_capture_extra

from qkwh.capture.sampling import (
    SamplerSpec,
    batch_seed,
    keep_mask,
    normalize_example_id,
    select_heads,
    stored_example_id,
)

SAMPLE = Path(__file__).resolve().parents[2] / "warehouse" / "sample" / "smollm2-135m"


def masks(spec: SamplerSpec, *, examples: range, layer: int, kind: str, seq_len: int) -> np.ndarray:
    """(n_examples, seq_len) bool masks."""
    return np.stack(
        [keep_mask(spec, example_id=e, layer=layer, kind=kind, seq_len=seq_len) for e in examples]
    )


def within_poisson(count: float, mean: float, var: float, z: float = 5.0) -> bool:
    return abs(count - mean) <= z * math.sqrt(var)


def test_masks_reproduce_every_position_of_the_embedded_sample():
    """The sample was checked against the reference capture code: every (example, layer, kind)
    mask must pick exactly its positions."""
    need_capture_extra()
    meta = json.loads((SAMPLE / "_saver_state.json").read_text())["model_metadata"]
    spec = SamplerSpec("uniform", meta["sampling_bucket_size"], meta["sampling_base_rate"])
    lengths = {0: 8192, 1: 8192, 2: 8192, 3: 7658}  # tokens per document (the sample's card)
    assert sum(lengths.values()) == meta["total_tokens"]
    checked = 0
    for folder in sorted(SAMPLE.glob("l??h??[qk]")):
        t = pq.read_table(folder / "data.parquet", columns=["example_id", "position", "bucket"])
        ex, pos = t["example_id"].to_numpy(), t["position"].to_numpy()
        for e, n in lengths.items():
            want = np.flatnonzero(
                keep_mask(
                    spec, example_id=e, layer=int(folder.name[1:3]), kind=folder.name[-1], seq_len=n
                )
            )
            np.testing.assert_array_equal(pos[ex == e], want, err_msg=f"{folder.name} example {e}")
            checked += 1
        np.testing.assert_array_equal(t["bucket"].to_numpy(), spec.bucket_of(pos))
    assert checked == 4 * len(list(SAMPLE.glob("l??h??[qk]"))) >= 80


def test_uniform_counts_per_bucket_within_poisson_bounds_and_q_k_independent():
    need_capture_extra()
    spec = SamplerSpec("uniform", bucket_size=32, base_rate=3.0)
    n_ex, seq = 300, 512
    q = masks(spec, examples=range(n_ex), layer=5, kind="q", seq_len=seq)
    k = masks(spec, examples=range(n_ex), layer=5, kind="k", seq_len=seq)
    p = 3.0 / 32
    trials = n_ex * 32
    for m in (q, k):
        per_bucket = m.reshape(n_ex, seq // 32, 32).sum(axis=(0, 2))
        for b, c in enumerate(per_bucket):
            assert within_poisson(c, trials * p, trials * p * (1 - p)), f"bucket {b}: {c} rows"
    # independent masks: a kept K position is a kept Q position with probability p, not 1
    both = int((q & k).sum())
    n = n_ex * seq
    assert within_poisson(both, n * p * p, n * p * p * (1 - p * p))
    assert not np.array_equal(q, k)
    # other layers draw other masks; the same (example, layer, kind) draws the same mask
    assert not np.array_equal(q, masks(spec, examples=range(n_ex), layer=6, kind="q", seq_len=seq))
    np.testing.assert_array_equal(
        q[:5], masks(spec, examples=range(5), layer=5, kind="q", seq_len=seq)
    )


def test_log_uniform_counts_per_bucket_within_poisson_bounds():
    need_capture_extra()
    spec = SamplerSpec(
        "log_uniform", bucket_size=100, base_rate=2.0
    )  # P = 7: first bucket [0, 255)
    n_ex, seq = 200, 4096
    m = masks(spec, examples=range(n_ex), layer=0, kind="k", seq_len=seq)
    pos = np.arange(seq)
    bucket = spec.bucket_of(pos)
    assert bucket[0] == 7 and bucket[254] == 7 and bucket[255] == 8 and bucket[4094] == 11
    prob = np.minimum(1.0, 2.0 / 2.0**bucket)
    for b in np.unique(bucket):
        sel = bucket == b
        mean = n_ex * prob[sel].sum()
        var = n_ex * (prob[sel] * (1 - prob[sel])).sum()
        assert within_poisson(m[:, sel].sum(), mean, var), f"bucket {b}"
    assert spec.metadata()["sampling_min_bucket_size"] == 128


def test_all_sampler_keeps_every_position():
    need_capture_extra()
    spec = SamplerSpec("all", bucket_size=16)
    assert masks(spec, examples=range(3), layer=1, kind="q", seq_len=40).all()
    assert spec.keep_probability == 1.0


def test_seeds_separate_examples_layers_and_kinds():
    seeds = {batch_seed(e, layer, kind) for e in range(20) for layer in range(20) for kind in "qk"}
    assert len(seeds) == 800
    assert all(0 <= s < 2**64 for s in seeds)
    assert batch_seed(-3, 0, "q") == batch_seed(2**64 - 3, 0, "q")  # ids enter modulo 2**64


def test_head_sampling_reproduces_the_embedded_sample_selection():
    meta = json.loads((SAMPLE / "_saver_state.json").read_text())["model_metadata"]
    sel = select_heads(
        num_layers=30,
        num_query_heads=9,
        num_key_heads=3,
        count=meta["head_sampling_requested_query_heads"],
        seed=meta["head_sampling_seed"],
        full_attention_only=False,
    )
    for key in (
        "head_sampling_selected_query_heads",
        "head_sampling_selected_key_heads",
        "head_sampling_num_layers",
        "head_sampling_strategy",
    ):
        assert sel.metadata[key] == meta[key], key
    for folder in SAMPLE.glob("l??h??[qk]"):  # the sample keeps 12 of the 60 heads
        layer, head, kind = int(folder.name[1:3]), int(folder.name[4:6]), folder.name[-1]
        assert head in (sel.query_heads if kind == "q" else sel.key_heads)[layer], folder.name


def test_head_sampling_rules():
    sel = select_heads(
        num_layers=4, num_query_heads=6, num_key_heads=2, count=5, seed=7, sliding_layers={1, 3}
    )
    assert sum(len(v) for v in sel.query_heads.values()) == 5
    assert set(sel.query_heads) <= {0, 2}  # full attention only: sliding layers are not candidates
    for layer, heads in sel.query_heads.items():
        assert sel.key_heads[layer] == tuple(sorted({h // 3 for h in heads}))
    assert sel.metadata["head_sampling_sliding_candidates_excluded"] == 12
    assert (
        select_heads(
            num_layers=4, num_query_heads=6, num_key_heads=2, count=5, seed=7, sliding_layers={1, 3}
        )
        == sel
    )
    everything = select_heads(num_layers=2, num_query_heads=4, num_key_heads=4, count=300, seed=0)
    assert everything.query_heads == {0: (0, 1, 2, 3), 1: (0, 1, 2, 3)}
    assert everything.metadata["head_sampling_selected_query_heads"] == 8
    with pytest.raises(ValueError, match="not a multiple"):
        select_heads(num_layers=2, num_query_heads=6, num_key_heads=4, count=3, seed=0)
    with pytest.raises(ValueError, match="no candidate heads"):
        select_heads(
            num_layers=2, num_query_heads=2, num_key_heads=1, count=3, seed=0, sliding_layers={0, 1}
        )


def test_example_ids():
    assert normalize_example_id(42) == 42 and normalize_example_id(np.int64(-7)) == -7
    assert normalize_example_id(3.0) == 3 and normalize_example_id(True) == 1
    a, b = normalize_example_id("doc-1"), normalize_example_id("doc-2")
    assert a != b and a == normalize_example_id("doc-1") and -(2**63) <= a < 2**63
    assert normalize_example_id(2**70) == normalize_example_id(str(2**70))  # too wide: hashed
    assert (
        stored_example_id(5) == 5
        and stored_example_id(2**31) == -(2**31)
        and stored_example_id(2**32 + 9) == 9
    )
