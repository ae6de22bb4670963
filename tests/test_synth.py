"""The synthetic generator: sampler semantics, planted geometry, determinism, sniffer layout."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from scipy import stats as sst

from qkwh import synth
from qkwh.analyses import rotation
from qkwh.analyses.types import HeadData


def _make(seed: int = 0, **kw) -> tuple[HeadData, synth.PlantedTruth]:
    return synth.make_head(np.random.default_rng(seed), **kw)


# ---------------------------------------------------------------------------------------------
# make_head
# ---------------------------------------------------------------------------------------------
def test_make_head_is_deterministic_in_the_generator() -> None:
    h1, t1 = _make(3, n_q=500, n_k=400, d=16)
    h2, t2 = _make(3, n_q=500, n_k=400, d=16)
    h3, _ = _make(4, n_q=500, n_k=400, d=16)
    for name in ("q", "k", "q_pos", "k_pos", "q_example", "k_example", "q_bucket", "k_bucket"):
        assert_array_equal(getattr(h1, name), getattr(h2, name))
    assert_array_equal(t1.a, t2.a)
    assert not np.array_equal(h1.q, h3.q)


def test_rows_follow_the_uniform_sampler_layout() -> None:
    head, truth = _make(
        0, n_q=6000, n_k=5000, d=8, n_examples=12, context_length=8192, bucket_size=512
    )
    assert head.q.shape == (6000, 8) and head.k.shape == (5000, 8)
    assert head.q.dtype == np.float32
    for pos, ex, bucket in (
        (head.q_pos, head.q_example, head.q_bucket),
        (head.k_pos, head.k_example, head.k_bucket),
    ):
        assert pos.dtype == np.int32 and ex.dtype == np.int32 and bucket.dtype == np.int32
        assert pos.min() >= 0 and pos.max() < 8192
        assert_array_equal(bucket, pos // 512)
        assert set(np.unique(ex)) == set(range(12))
        key = ex.astype(np.int64) * 8192 + pos
        assert np.all(np.diff(key) > 0)  # sorted by (example, position), cells distinct
        # positions uniform on [0, L): KS test (fixed seed, so this is deterministic)
        assert sst.kstest((pos + 0.5) / 8192, "uniform").pvalue > 1e-3
        assert np.bincount(bucket, minlength=16).min() > 0.8 * len(pos) / 16
    # Q and K are sampled at independent positions: shared (example, position) cells occur only
    # at the chance rate n_q·n_k/(n_examples·L) ≈ 305 (± 4 Poisson s.d.)
    shared = len(
        np.intersect1d(
            head.q_example.astype(np.int64) * 8192 + head.q_pos,
            head.k_example.astype(np.int64) * 8192 + head.k_pos,
        )
    )
    expected = 6000 * 5000 / (12 * 8192)
    assert abs(shared - expected) < 4 * np.sqrt(expected)
    assert (head.context_length, head.bucket_size, head.sliding_window) == (8192, 512, None)
    assert truth.position_centre == 4095.5


def test_planted_frame_is_orthonormal() -> None:
    planes = [(synth.plane_frequency(3, 8192), 1.0), (synth.plane_frequency(6, 8192), 0.5)]
    _, truth = _make(1, n_q=10, n_k=10, d=12, rope_planes=planes)
    basis = np.vstack([truth.a, truth.b, truth.planes.reshape(-1, 12)])
    assert_allclose(basis @ basis.T, np.eye(6), atol=1e-12)
    assert_allclose(truth.rope_frequencies, [p[0] for p in planes])
    assert_allclose(truth.rope_amplitudes, [1.0, 0.5])


def test_sample_statistics_along_planted_axes() -> None:
    """The rows realise the generative model: means, slopes, separation, noise (within ~4 SE)."""
    head, truth = _make(2, n_q=20000, n_k=20000, d=16, rope_planes=())
    q, k = head.q.astype(np.float64), head.k.astype(np.float64)
    n, sd_t = 20000, np.sqrt(truth.position_var)
    qa, ka = q @ truth.a, k @ truth.a
    assert_allclose(np.polyfit(head.q_pos, qa, 1)[0], truth.alpha_q, atol=4 / (sd_t * np.sqrt(n)))
    assert_allclose(np.polyfit(head.k_pos, ka, 1)[0], truth.alpha_k, atol=4 / (sd_t * np.sqrt(n)))
    resid_q = qa - truth.alpha_q * (head.q_pos - truth.position_centre)
    assert_allclose(resid_q.mean(), truth.mu_q_a, atol=4 / np.sqrt(n))
    assert_allclose(
        (q @ truth.b).mean() - (k @ truth.b).mean(), truth.separation, atol=6 / np.sqrt(n)
    )
    assert_allclose((q @ truth.b).mean(), truth.mu_q_b, atol=4 / np.sqrt(n))
    assert_allclose((q @ truth.b).std(), truth.noise_sd, rtol=0.02)
    other = np.linalg.svd(np.column_stack([truth.a, truth.b]), full_matrices=True)[0][:, 2:]
    assert_allclose((q @ other).std(axis=0), truth.noise_sd, rtol=0.03)
    assert_allclose(truth.bias_strength, truth.mu_q_a * truth.alpha_k)
    assert_allclose(truth.bias_strength_ctx, truth.bias_strength * 8192)


def test_rotation_planes_turn_with_position() -> None:
    om = synth.plane_frequency(5, 8192)
    head, truth = _make(3, n_q=4000, n_k=4000, d=12, rope_planes=[(om, 2.0)], rope_phase_sd=0.2)
    u, v = truth.planes[0]
    for x, pos in ((head.q, head.q_pos), (head.k, head.k_pos)):
        theta = np.arctan2(x @ v, x @ u)
        res = np.exp(1j * (theta - om * pos)).mean()
        assert abs(res) > 0.8  # phase locked to ω·position (jitter 0.2 rad, noise 1 vs amplitude 2)


def test_drift_scale_and_shared_positions() -> None:
    h, t = _make(
        5,
        n_q=300,
        n_k=300,
        d=8,
        drift_scale=0.25,
        alpha_q=4e-3,
        alpha_k=8e-3,
        shared_positions=True,
    )
    assert_allclose([t.alpha_q, t.alpha_k], [1e-3, 2e-3])
    assert t.drift_scale == 0.25
    assert_array_equal(h.q_pos, h.k_pos)
    assert_array_equal(h.q_example, h.k_example)
    with pytest.raises(ValueError, match="n_q == n_k"):
        _make(5, n_q=300, n_k=200, d=8, shared_positions=True)
    with pytest.raises(ValueError, match="too small"):
        _make(5, n_q=30, n_k=30, d=5, rope_planes=None)  # 2 default planes need d >= 6


def test_default_rope_planes_are_on_the_rotation_grid() -> None:
    from qkwh.analyses import stats

    planes = synth.default_rope_planes(8192)
    grid = stats.log_omega_grid(8192, 512, 512)
    assert len(planes) == 2 and all(grid[0] <= om <= grid[-1] for om, _ in planes)
    _, truth = _make(0, n_q=10, n_k=10, d=8)
    assert_allclose(truth.rope_frequencies, [om for om, _ in planes])


# ---------------------------------------------------------------------------------------------
# write_dataset
# ---------------------------------------------------------------------------------------------
WRITE = dict(
    model_name="synthetic/tiny",
    n_layers=3,
    n_q_heads=6,
    n_kv_heads=2,
    d=16,
    rows_per_file=400,
    n_examples=6,
    context_length=2048,
    bucket_size=128,
)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_write_dataset_layout_schema_and_state(tmp_path: Path) -> None:
    heads = [(0, 0), (0, 2), (0, 4), (2, 5)]
    root = synth.write_dataset(tmp_path / "m", heads=heads, seed=7, **WRITE)
    names = sorted(p.name for p in root.iterdir())
    assert names == [
        "_saver_state.json",
        "_synth_truth.json",
        "l00h00k",
        "l00h00q",
        "l00h01k",
        "l00h02q",
        "l00h04q",
        "l02h01k",
        "l02h05q",
    ]  # k_head = q_head // 3
    table = pq.read_table(root / "l00h02q" / "data.parquet")
    expected = pa.schema(
        [
            ("bucket", pa.int32()),
            ("example_id", pa.int32()),
            ("position", pa.int32()),
            ("vector", pa.list_(pa.float32(), 16)),
            ("sliding_window", pa.int32()),
        ]
    )
    assert table.schema.equals(expected)
    assert table.num_rows == 400 and table.column("sliding_window").null_count == 400
    meta = pq.ParquetFile(root / "l00h02q" / "data.parquet").metadata
    assert meta.row_group(0).column(3).compression == "ZSTD"
    pos = table.column("position").to_numpy()
    assert_array_equal(table.column("bucket").to_numpy(), pos // 128)
    state = json.loads((root / "_saver_state.json").read_text())
    assert state["model_name"] == "synthetic/tiny"
    md = state["model_metadata"]
    assert (
        md["head_sampling_num_query_heads"],
        md["head_sampling_num_key_heads"],
        md["head_dim"],
    ) == (6, 2, 16)
    assert (md["sampling_strategy"], md["sampling_bucket_size"], md["tokenizer_max_length"]) == (
        "uniform",
        128,
        2048,
    )
    assert md["num_hidden_layers"] == 3 and md["head_sampling_selected_query_heads"] == 4
    assert md["head_sampling_selected_key_heads"] == 3
    assert sum(state["bucket_counts"].values()) == 7 * 400  # every file's rows
    truth = json.loads((root / "_synth_truth.json").read_text())["heads"]
    assert [(t["layer"], t["q_head"], t["k_head"]) for t in truth] == [
        (0, 0, 0),
        (0, 2, 0),
        (0, 4, 1),
        (2, 5, 1),
    ]


def test_write_dataset_is_deterministic_and_shares_k_and_positions(tmp_path: Path) -> None:
    a = synth.write_dataset(tmp_path / "a", heads=[(1, 0), (1, 1)], seed=3, **WRITE)
    b = synth.write_dataset(tmp_path / "b", heads=[(1, 1), (1, 0)], seed=3, **WRITE)
    c = synth.write_dataset(tmp_path / "c", heads=[(1, 1)], seed=3, **WRITE)
    d = synth.write_dataset(tmp_path / "d", heads=[(1, 0), (1, 1)], seed=4, **WRITE)
    for name in ("l01h00q", "l01h01q", "l01h00k"):
        assert _digest(a / name / "data.parquet") == _digest(b / name / "data.parquet")
        assert _digest(a / name / "data.parquet") != _digest(d / name / "data.parquet")
    # a k file and a q file do not depend on which other heads were selected
    assert _digest(a / "l01h00k" / "data.parquet") == _digest(c / "l01h00k" / "data.parquet")
    assert _digest(a / "l01h01q" / "data.parquet") == _digest(c / "l01h01q" / "data.parquet")
    # heads of one layer share the query positions (one sampling mask per layer and kind)
    q0 = pq.read_table(a / "l01h00q" / "data.parquet")
    q1 = pq.read_table(a / "l01h01q" / "data.parquet")
    k0 = pq.read_table(a / "l01h00k" / "data.parquet")
    assert q0.column("position").equals(q1.column("position"))
    assert not q0.column("vector").equals(q1.column("vector"))
    assert not q0.column("position").equals(k0.column("position"))


def test_written_head_recovers_planted_values(tmp_path: Path) -> None:
    """Round trip: files -> HeadData -> rotation recovers the per-head planted truth."""
    root = synth.write_dataset(
        tmp_path / "m",
        heads=[(0, 3)],
        seed=1,
        rows_per_file=6000,
        model_name="x",
        n_layers=1,
        n_q_heads=6,
        n_kv_heads=2,
        d=16,
        n_examples=8,
        context_length=4096,
        bucket_size=256,
        rope_planes=(),
        param_jitter=0.2,
        alpha_k=2e-3,
    )

    def read(name: str):
        t = pq.read_table(root / name / "data.parquet")
        vec = t.column("vector").combine_chunks()
        return (
            vec.values.to_numpy().reshape(-1, 16),
            t.column("position").to_numpy(),
            t.column("example_id").to_numpy(),
        )

    q, t, qe = read("l00h03q")
    k, s, ke = read("l00h01k")
    head = HeadData(
        q=q,
        q_pos=t,
        q_example=qe,
        q_bucket=t // 256,
        k=k,
        k_pos=s,
        k_example=ke,
        k_bucket=s // 256,
        context_length=4096,
        bucket_size=256,
    )
    row = {c: v[0] for c, v in rotation.analyse(head).tables["rotation_heads"].items()}
    truth = json.loads((root / "_synth_truth.json").read_text())["heads"][0]
    assert truth["alpha_k"] != 2e-3  # jittered
    assert_allclose(row["alpha_k"], truth["alpha_k"], rtol=0.05)
    assert_allclose(row["mu_q_a"], truth["mu_q_a"], rtol=0.06)
    assert_allclose(row["bias_strength"], truth["bias_strength"], rtol=0.08)
    assert_allclose(row["mu_q_b"] - row["mu_k_b"], truth["mu_q_b"] - truth["mu_k_b"], rtol=0.05)


def test_write_dataset_rejects_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown planted parameter"):
        synth.write_dataset(tmp_path / "a", alpha_z=1.0, **WRITE)
    with pytest.raises(ValueError, match="outside"):
        synth.write_dataset(tmp_path / "b", heads=[(3, 0)], **WRITE)
    with pytest.raises(ValueError, match="multiple"):
        synth.write_dataset(tmp_path / "c", **{**WRITE, "n_kv_heads": 4})
    with pytest.raises(ValueError, match="distinct rows"):
        synth.write_dataset(tmp_path / "d", **{**WRITE, "rows_per_file": 6 * 2048 + 1})


def test_layer_drift_decay_weakens_later_layers(tmp_path: Path) -> None:
    root = synth.write_dataset(
        tmp_path / "m", heads=[(0, 0), (2, 0)], seed=0, layer_drift_decay=3.0, **WRITE
    )
    truth = {t["layer"]: t for t in json.loads((root / "_synth_truth.json").read_text())["heads"]}
    assert_allclose(truth[2]["drift_scale"] / truth[0]["drift_scale"], np.exp(-3.0 * 2 / 3))
    assert_allclose(truth[2]["alpha_k"] / truth[0]["alpha_k"], np.exp(-2.0))


def test_doc_spread_scales_each_documents_bias_and_drift(tmp_path: Path) -> None:
    kw = dict(n_q=3000, n_k=3000, d=8, n_examples=6, context_length=1024, bucket_size=256)
    kw.update(rope_planes=(), noise_sd=0.01, mu_q_a=4.0, alpha_q=2e-3)
    plain, _ = synth.make_head(np.random.default_rng(5), **kw)
    same, _ = synth.make_head(np.random.default_rng(5), doc_spread=0.0, **kw)
    assert_array_equal(plain.q, same.q)  # 0: identical documents, the very same head
    spread, truth = synth.make_head(np.random.default_rng(5), doc_spread=0.5, doc_seed=3, **kw)
    factors = synth.doc_factors(6, 0.5, synth._rng(3, "docs"))  # make_head's stream
    assert factors is not None and np.ptp(factors) > 0.3
    centre = (1024 - 1) / 2
    for e in range(6):
        rows = spread.q_example == e
        a_q = spread.q[rows].astype(np.float64) @ truth.a
        want = factors[e] * (4.0 + 2e-3 * (spread.q_pos[rows] - centre))
        assert_allclose(a_q, want, atol=0.05)
    # written models: the factors are drawn once per model and listed in the truth file
    synth.write_dataset(
        tmp_path / "a",
        n_layers=1,
        n_q_heads=2,
        n_kv_heads=1,
        d=8,
        rows_per_file=300,
        doc_spread=0.5,
    )
    truth_file = json.loads((tmp_path / "a" / "_synth_truth.json").read_text())
    assert truth_file["doc_spread"] == 0.5 and len(truth_file["doc_factors"]) == 16
    synth.write_dataset(
        tmp_path / "b", n_layers=1, n_q_heads=2, n_kv_heads=1, d=8, rows_per_file=300
    )
    assert "doc_factors" not in json.loads((tmp_path / "b" / "_synth_truth.json").read_text())
    with pytest.raises(ValueError, match="doc_spread"):
        synth.write_dataset(tmp_path / "c", doc_spread=-1.0)


def test_default_models_have_enough_layers_for_intervals():
    """A model written with the defaults (library and `qkwh synth`) gets layer-bootstrap
    intervals, so `qkwh compare` can compare it: the bootstrap needs min_layers layers."""
    import inspect

    import yaml
    from typer.testing import CliRunner

    from qkwh.cli import app
    from qkwh.paths import DBT_PROJECT_DIR

    project = yaml.safe_load((DBT_PROJECT_DIR / "dbt_project.yml").read_text())
    min_layers = int(project["vars"]["min_layers"])
    default = inspect.signature(synth.write_dataset).parameters["n_layers"].default
    assert default == synth.DEFAULT_LAYERS > min_layers
    r = CliRunner().invoke(app, ["synth", "--help"], env={"COLUMNS": "200"})
    line = next(ln for ln in r.output.splitlines() if "--layers" in ln)
    assert f"default: {synth.DEFAULT_LAYERS}" in line.replace("[", " ").replace("]", " ")
