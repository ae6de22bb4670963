"""The RoPE band analysis (docs/metrics/rope.md): invariants on synthetic heads, the band
plasticity pipeline against plasticity's own, the embedded sample through compute and SQL, a
model without frequencies, and the shared fixture.

References are naive: every causal same-example (query, key) pair enumerated explicitly.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import duckdb
import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from typer.testing import CliRunner

from qkwh import synth
from qkwh.analyses import plasticity, rope
from qkwh.analyses.declared.plasticity import PlasticityParams
from qkwh.analyses.declared.rope import RopeParams
from qkwh.analyses.types import HeadData
from qkwh.cli import app
from qkwh.compute.work import run_analyses
from qkwh.params import RunConfig
from qkwh.rope_config import default_inv_freq

M, L = 64, 1024  # bucket size and context of the small synthetic heads


@pytest.fixture(autouse=True, scope="module")
def _one_blas_thread():
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1, user_api="blas"):
        yield


def small_head(
    seed: int = 0,
    *,
    d: int = 16,
    n: int = 400,
    theta: float | None = 1000.0,
    rotary: int | None = None,
    layout: str = "half",
    source: str = "rope_theta",
    n_examples: int = 4,
) -> HeadData:
    """A synthetic head (d dims, n q and n k rows over 4 examples of L tokens, m = M) with the
    planes of ``theta`` over ``rotary`` dims (default d; None theta: a NoPE layer).  theta 1000
    over 16 dims, m 64, L 1024 gives planes 0-2 high, 3-5 mid, 6-7 low."""
    head, _ = synth.make_head(
        np.random.default_rng(seed),
        n_q=n,
        n_k=n,
        d=d,
        n_examples=n_examples,
        context_length=L,
        bucket_size=M,
        rope_planes=(),
        alpha_q=5e-3,
        alpha_k=1e-2,
    )
    freqs = None if theta is None else default_inv_freq(theta, rotary or d)
    planes = rope.layer_planes(
        d, freqs, bucket_size=M, context_length=L, layout=layout, source=source
    )
    return dataclasses.replace(head, rope=planes)


def naive_pairs(head: HeadData) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every causal same-example pair: (query row, key row, distance), naive loops."""
    qi, kj, dist = [], [], []
    for i in range(len(head.q_pos)):
        for j in range(len(head.k_pos)):
            if head.q_example[i] == head.k_example[j] and head.k_pos[j] <= head.q_pos[i]:
                qi.append(i)
                kj.append(j)
                dist.append(head.q_pos[i] - head.k_pos[j])
    return np.array(qi), np.array(kj), np.array(dist)


def table(result, name: str) -> dict[str, np.ndarray]:
    return result.tables[name]


def test_energy_shares_sum_to_one_and_planes_are_the_catalogs():
    head = small_head()
    res = rope.analyse(head, RopeParams(), PlasticityParams(), seed=0)
    p = table(res, rope.PLANES)
    # float64 sums of 8 positive shares: equal to 1 up to rounding (rtol 1e-12)
    assert_allclose(p["q_energy_share"].sum(), 1.0, rtol=1e-12)
    assert_allclose(p["k_energy_share"].sum(), 1.0, rtol=1e-12)
    assert list(p["band"]) == ["high"] * 3 + ["mid"] * 3 + ["low"] * 2
    assert list(p["dim_a"]) == list(range(8)) and list(p["dim_b"]) == list(range(8, 16))
    q = head.q.astype(np.float64)
    assert_allclose(p["q_energy"][3], np.mean(q[:, 3] ** 2 + q[:, 11] ** 2), rtol=1e-12)


def test_plane_logits_match_every_pair_enumerated():
    head = small_head(1, n=240)
    res = rope.analyse(head, RopeParams(), PlasticityParams(), seed=0)
    p = table(res, rope.PLANES)
    qi, kj, _ = naive_pairs(head)
    q, k = head.q.astype(np.float64)[qi], head.k.astype(np.float64)[kj]
    for i, (a, b) in enumerate(zip(p["dim_a"], p["dim_b"])):
        contrib = q[:, a] * k[:, a] + q[:, b] * k[:, b]
        # sums and sums of squares over ~7000 pairs in another order: rtol 1e-9
        assert_allclose(p["logit_mean"][i], contrib.mean(), rtol=1e-9, atol=1e-12)
        assert_allclose(p["logit_sd"][i], contrib.std(ddof=1), rtol=1e-9)


def test_pair_sums_do_not_depend_on_the_blocks():
    """Many short examples (grouped into blocks, cross-example cells masked) and examples split
    into query blocks (small ``block``) give the same sums, up to summation order, and every
    causal same-example pair once."""
    for head in (small_head(9, n=300, n_examples=60), small_head(9, n=300)):
        planes = rope.head_planes(head, RopeParams())
        dims = [planes.band_dims(b) for b in planes.bands]
        ref = rope.pair_sums(head, planes, dims, block=10**9)
        qi, _, _ = naive_pairs(head)
        assert ref.n_pairs == qi.size
        for block in (700, 50):
            got = rope.pair_sums(head, planes, dims, block=block)
            assert got.n_pairs == ref.n_pairs
            assert_array_equal(got.bin_n, ref.bin_n)
            for f in ("dim_sum", "dim_sq", "cross", "bin_sum", "bin_sq"):
                assert_allclose(getattr(got, f), getattr(ref, f), rtol=1e-10, atol=1e-9, err_msg=f)


def test_band_logits_add_up_to_the_full_dot_product_per_distance_bin():
    head = small_head(2, n=240, n_examples=30)
    res = rope.analyse(head, RopeParams(), PlasticityParams(), seed=0)
    t = table(res, rope.BAND_LOGITS)
    qi, kj, dist = naive_pairs(head)
    qk = np.einsum("ij,ij->i", head.q.astype(np.float64)[qi], head.k.astype(np.float64)[kj])
    bins = dist // M
    assert set(t["band"]) == {"high", "mid", "low"}
    for b in np.unique(bins):
        rows = t["distance_bin"] == b
        assert set(t["n_pairs"][rows]) == {int((bins == b).sum())}  # every band, every pair
        # three band sums in float64 against one naive sum: rtol 1e-9
        assert_allclose(t["logit_sum"][rows].sum(), qk[bins == b].sum(), rtol=1e-9, atol=1e-9)
    # per band: mean and sd follow from the accumulators
    band_dims = {"high": [0, 1, 2], "mid": [3, 4, 5], "low": [6, 7]}
    q, k = head.q.astype(np.float64)[qi], head.k.astype(np.float64)[kj]
    for band, planes in band_dims.items():
        dims = planes + [p + 8 for p in planes]
        contrib = np.einsum("ij,ij->i", q[:, dims], k[:, dims])
        row = (t["band"] == band) & (t["distance_bin"] == 1)
        ref = contrib[bins == 1]
        assert_allclose(t["logit_mean"][row], ref.mean(), rtol=1e-9)
        assert_allclose(t["logit_sd"][row], ref.std(ddof=1), rtol=1e-9)


@pytest.mark.parametrize(
    "overrides",
    [{}, {"plasticity.pairs": "exhaustive"}, {"plasticity.empirical": "true"}],
    ids=["sampled", "exhaustive", "empirical"],
)
def test_every_dim_reproduces_the_heads_own_plasticity_to_the_last_bit(overrides):
    """A NoPE layer has one band (unrotated) holding every dim: its `only` rows are the head's
    plasticity_buckets, bit for bit, through compute's dispatch with the shared precomputations;
    its `without` has no dim and no row."""
    head = small_head(3, theta=None)
    cfg = RunConfig().with_overrides({**overrides, "rope.variants": "only,without"})
    out = run_analyses(head, ("plasticity", "rope"), cfg)
    want = table(out["plasticity"], plasticity.BUCKETS)
    got = table(out["rope"], rope.BAND_PLASTICITY)
    assert set(got["band"]) == {"unrotated"} and set(got["variant"]) == {"only"}
    assert np.isfinite(want["ap_bucket"]).sum() > 10
    if "plasticity.empirical" in overrides:
        assert np.isfinite(want["ap_bucket_empirical"]).sum() > 10
    for c, v in want.items():
        assert_array_equal(got[c], v, err_msg=c)
    # and on a rotated head, every dim by hand, without the shared precomputations
    head = small_head(4)
    pp = cfg.plasticity
    want = table(plasticity.analyse(head, pp, seed=5), plasticity.BUCKETS)
    got = rope.band_buckets(head, pp, np.arange(head.d), seed=5)
    for c, v in want.items():
        assert_array_equal(got[c], v, err_msg=c)


def test_without_a_band_is_only_its_complement():
    head = small_head(5)
    pp = PlasticityParams()
    res = rope.analyse(head, RopeParams(variants="only,without"), pp, seed=0)
    t = table(res, rope.BAND_PLASTICITY)
    assert {(b, v) for b, v in zip(t["band"], t["variant"])} == {
        (b, v) for b in ("high", "mid", "low") for v in ("only", "without")
    }
    rows = (t["band"] == "low") & (t["variant"] == "without")
    rest = np.r_[0:6, 8:14]  # every dim of high and mid: all but planes 6, 7 (dims 6, 7, 14, 15)
    exact = rope.band_buckets(head, pp, rest, seed=0)
    for c, v in exact.items():
        assert_array_equal(t[c][rows], v, err_msg=c)
    # the same pipeline on a head whose vectors hold those dims only (moments recomputed from
    # the rows, not restricted): equal up to summation order (rtol 1e-9)
    cut = dataclasses.replace(head, q=head.q[:, rest], k=head.k[:, rest], rope=None)
    fresh = table(plasticity.analyse(cut, pp, seed=0), plasticity.BUCKETS)
    assert_allclose(t["ap_bucket"][rows], fresh["ap_bucket"], rtol=1e-9)
    assert_array_equal(t["n_pairs"][rows], fresh["n_pairs"])
    # the bands differ from each other (they are not the head's run relabelled)
    only = t["variant"] == "only"
    aps = {b: t["ap_bucket"][only & (t["band"] == b)] for b in ("high", "mid", "low")}
    assert not np.allclose(aps["high"], aps["low"], equal_nan=True)


def test_layout_recorded_at_capture_wins_over_the_parameter():
    assumed = small_head(6, source="rope_theta")
    p = rope.head_planes(assumed, RopeParams(layout="interleaved"))
    assert list(p.dim_a[:3]) == [0, 2, 4] and list(p.dim_b[:3]) == [1, 3, 5]
    captured = small_head(6, source="capture")
    p = rope.head_planes(captured, RopeParams(layout="interleaved"))
    assert list(p.dim_a[:3]) == [0, 1, 2] and list(p.dim_b[:3]) == [8, 9, 10]


def test_absent_bands_have_no_rows_and_unrotated_dims_are_a_band():
    # theta 100: planes 0-3 rotated over dims 0-7 (high, high, high, mid), dims 8-15 unrotated
    head = small_head(7, theta=100.0, rotary=8)
    res = rope.analyse(head, RopeParams(), PlasticityParams(), seed=0)
    p = table(res, rope.PLANES)
    assert list(p["band"][4:]) == ["unrotated"] * 8 and list(p["dim_b"][4:]) == [None] * 8
    assert np.isinf(p["wavelength"][4:]).all() and (p["inv_freq"][4:] == 0).all()
    bands = set(p["band"])
    assert set(table(res, rope.BAND_PLASTICITY)["band"]) == bands
    assert set(table(res, rope.BAND_LOGITS)["band"]) == bands
    assert bands == {"high", "mid", "unrotated"}  # low has no plane: absent


def test_unknown_planes_are_refused_with_a_clear_message():
    head = dataclasses.replace(small_head(8), rope=None)
    with pytest.raises(ValueError, match=r"RoPE frequencies .* unknown"):
        rope.analyse(head, RopeParams(), PlasticityParams(), seed=0)
    wrong = dataclasses.replace(small_head(8), q=np.zeros((400, 12), np.float32))
    with pytest.raises(ValueError, match="do not cover the head's 12 dims"):
        rope.head_planes(wrong, RopeParams())


# ---------------------------------------------------------------------------------------------
# Through the warehouse
# ---------------------------------------------------------------------------------------------


def test_sample_through_compute_and_the_sql_function(sample_copy: Path, tmp_path: Path):
    from qkwh import udf
    from qkwh.compute.runner import compute
    from qkwh.ingest import ingest

    db = tmp_path / "wh.duckdb"
    ingest(str(sample_copy), warehouse=db)
    report = compute(db, workers=1, analyses=("rope",))
    assert report.failures == [] and report.n_written == 12 and report.left_out == []
    con = duckdb.connect(str(db), read_only=True)
    try:
        # SmolLM2-135M: planes 0-12 high, 13-19 mid, 20-31 low on every head
        bands = con.execute(
            "SELECT band, min(plane), max(plane), count(DISTINCT (layer, q_head)) "
            "FROM rope_planes GROUP BY band ORDER BY 2"
        ).fetchall()
        assert bands == [("high", 0, 12, 12), ("mid", 13, 19, 12), ("low", 20, 31, 12)]
        shares = con.execute(
            "SELECT sum(q_energy_share), sum(k_energy_share) FROM rope_planes GROUP BY layer, q_head"
        ).fetchall()
        assert_allclose(np.array(shares), 1.0, rtol=1e-12)
        assert con.execute(
            "SELECT count(*) FROM rope_band_plasticity WHERE variant <> 'only'"
        ).fetchone() == (0,)
        udf.register(con)
        got = con.execute(
            "SELECT layer, q_head, p.plane, p.logit_mean, p.q_energy_share "
            "FROM (SELECT h.layer, h.q_head, unnest(qkwh_rope(h).planes) AS p "
            "      FROM head_inputs('smollm2-135m') AS h) ORDER BY 1, 2, 3"
        ).fetchall()
        want = con.execute(
            "SELECT layer, q_head, plane, logit_mean, q_energy_share FROM rope_planes "
            "ORDER BY 1, 2, 3"
        ).fetchall()
        assert got == want and len(want) == 12 * 32
    finally:
        con.close()


def test_model_without_frequencies_is_left_out_of_rope_with_one_warning(tmp_path: Path):
    from qkwh.ingest import ingest

    data = tmp_path / "synth"
    synth.write_dataset(
        data, n_layers=2, n_q_heads=2, n_kv_heads=1, d=16, rows_per_file=300, n_examples=4
    )
    db = tmp_path / "wh.duckdb"
    ingest(str(data), warehouse=db, model_id="nofreq")
    con = duckdb.connect(str(db))
    con.execute("DELETE FROM rope_frequencies")  # as for a model whose frequencies are unknown
    con.close()
    r = CliRunner().invoke(
        app, ["compute", "-w", str(db), "--analyses", "pca,rope", "--workers", "1"]
    )
    assert r.exit_code == 0, r.output
    lines = [x for x in r.output.splitlines() if "RoPE frequencies unknown" in x]
    assert len(lines) == 1 and "'nofreq'" in lines[0] and "qkwh findings" in r.output
    con = duckdb.connect(str(db), read_only=True)
    try:
        assert con.execute("SELECT count(*) FROM pca_heads").fetchone() == (4,)
        for t in (rope.PLANES, rope.BAND_PLASTICITY, rope.BAND_LOGITS):
            assert con.execute(f"SELECT count(*) FROM {t}").fetchone() == (0,)
        from qkwh import udf

        udf.register(con)
        assert con.execute(
            "SELECT DISTINCT len(r.planes), len(r.band_plasticity), len(r.band_logits) "
            "FROM (SELECT qkwh_rope(h) AS r FROM head_inputs('nofreq') AS h)"
        ).fetchall() == [(0, 0, 0)]
    finally:
        con.close()


def test_shared_fixture_heads(shared_fixture: Path, tmp_path: Path):
    from qkwh import store
    from qkwh.compute.frequencies import load_rope_planes
    from qkwh.compute.runner import load_units
    from qkwh.compute.work import head_data
    from qkwh.ingest import ingest
    from qkwh.sniffed.reader import read_file

    db = tmp_path / "wh.duckdb"
    ingest(str(shared_fixture), warehouse=db)
    con = store.connect(db, read_only=True)
    try:
        units = load_units(con, None)
        planes = load_rope_planes(con)
    finally:
        con.close()
    cfg = RunConfig()
    for unit in units[:: max(1, len(units) // 3)][:3]:
        rp = planes[(unit.model_id, unit.layer)]
        head = head_data(unit, read_file(unit.q_path), read_file(unit.k_path), cfg, rp)
        out = run_analyses(head, ("plasticity", "rope"), cfg)["rope"]
        p = table(out, rope.PLANES)
        assert list(p["band"]) == ["high"] * 13 + ["mid"] * 7 + ["low"] * 12
        assert_allclose(p["q_energy_share"].sum(), 1.0, rtol=1e-12)
        t = table(out, rope.BAND_PLASTICITY)
        assert set(t["band"]) == {"high", "mid", "low"}
        assert np.isfinite(t["ap_bucket"]).any()


# ---------------------------------------------------------------------------------------------
# Planted: the position drift in one band (qkwh synth --set drift_plane_first/last)
# ---------------------------------------------------------------------------------------------


def _planted(tmp_path: Path, first: int, last: int) -> tuple[str, str]:
    """Write a one-head synthetic model whose drift axis lies in RoPE planes first..last, ingest
    it (frequencies from its recorded rope_theta 10000: planes 0-15 high, 16-24 mid, 25-31 low),
    compute rope, and return (the band with the lowest far-bucket plasticity, the band whose
    logit falls most with distance)."""
    from qkwh.compute.runner import compute
    from qkwh.ingest import ingest

    data, db = tmp_path / f"p{first}", tmp_path / f"p{first}.duckdb"
    r = CliRunner().invoke(
        app,
        [
            *("synth", str(data), "--layers", "1", "--q-heads", "1", "--kv-heads", "1"),
            *("--set", f"drift_plane_first={first}", "--set", f"drift_plane_last={last}"),
        ],
    )
    assert r.exit_code == 0, r.output
    ingest(str(data), warehouse=db, model_id="planted")
    report = compute(db, workers=1, analyses=("rope",))
    assert report.failures == [] and report.n_written == 1
    con = duckdb.connect(str(db), read_only=True)
    try:
        far = con.execute(
            "SELECT band FROM rope_band_plasticity WHERE variant = 'only' AND q_bucket >= 8 "
            "GROUP BY band ORDER BY avg(ap_bucket) LIMIT 1"
        ).fetchone()[0]
        decay = con.execute(
            "SELECT band FROM rope_band_logits GROUP BY band ORDER BY "
            "max(logit_mean) FILTER (WHERE distance_bin = 0) "
            "- max(logit_mean) FILTER (WHERE distance_bin = 14) DESC LIMIT 1"
        ).fetchone()[0]
        return far, decay
    finally:
        con.close()


def test_planted_band_is_the_one_where_position_wins(tmp_path: Path):
    """The drift puts a shared, position-driven term mu_q_a * alpha_k * (s - centre) in the
    logits of the planted dims: every query orders two keys far apart the same way, so the
    planted band's `only` plasticity is the lowest at far buckets (q_bucket >= 8, tau >= L/2,
    where the eligible keys spread widest in position), and its logit contribution falls most
    from distance bin 0 to bin 14.  Moving the drift to another band moves both."""
    assert _planted(tmp_path, 25, 31) == ("low", "low")
    assert _planted(tmp_path, 0, 15) == ("high", "high")


def test_synth_drift_planes_are_checked_and_leave_the_default_bytes_alone(tmp_path: Path):
    r = CliRunner().invoke(app, ["synth", str(tmp_path / "bad"), "--set", "drift_plane_first=40"])
    assert r.exit_code != 0 and "drift_plane_first=40" in r.output
    a = synth.write_dataset(tmp_path / "a", n_layers=1, n_q_heads=1, n_kv_heads=1, rows_per_file=50)
    b = synth.write_dataset(
        tmp_path / "b",
        n_layers=1,
        n_q_heads=1,
        n_kv_heads=1,
        rows_per_file=50,
        drift_plane_first=-1,
        drift_plane_last=-1,
    )
    for f in sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file()):
        assert (a / f).read_bytes() == (b / f).read_bytes(), f
    frame = synth.make_frame(np.random.default_rng(0), 64, 2, drift_dims=[25, 57])
    assert_allclose(np.abs(frame.a[[25, 57]]).sum() > 0, True)
    assert_allclose(np.delete(frame.a, [25, 57]), 0.0, atol=0)
    basis = np.column_stack([frame.a, frame.b, *frame.planes.reshape(4, 64)])
    assert_allclose(basis.T @ basis, np.eye(6), atol=1e-12)
