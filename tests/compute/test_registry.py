"""The analysis registry: one declaration per analysis, read by compute, writer, store, UDFs, CLI.

* the SQL functions and the bulk path produce identical rows, every table, on a fixture whose
  files carry a sliding window, are not sorted by (example, position), and exceed the row cap;
* a toy analysis declared once, at run time, is computed, written, resumed after an
  interruption, recomputed alone when its parameter changes, run in worker processes, and
  callable from SQL;
* declarations and parameters are checked.
"""

from __future__ import annotations

import dataclasses
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import duckdb
import numpy as np
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from qkwh import store, udf
from qkwh.analyses import precompute, registry
from qkwh.analyses.registry import Analysis, Table
from qkwh.analyses.types import AnalysisResult, HeadData
from qkwh.cli import app
from qkwh.compute.runner import compute
from qkwh.config import load_run_config
from qkwh.ingest import ingest
from qkwh.params import RunConfig
from qkwh.sniffed.writer import write_vectors_file
from tests.conftest import SAMPLE

N_HEADS = 12  # the embedded sample
WINDOW = 1500  # tokens; the sample's context is 8192
runner = CliRunner()


def _stored(con, table: str, key: tuple[str, ...], analysis: str) -> dict[tuple, list[dict]]:
    """(layer, q_head) -> the head's rows of ``table`` in the analysis's current parameter set
    (head key and config_id dropped), in key order."""
    order = ", ".join(("layer", "q_head", *key))
    cur = con.execute(
        f"SELECT * FROM {table} WHERE config_id IN (SELECT config_id FROM current_config "
        f"WHERE analysis = ?) ORDER BY {order}",
        [analysis],
    )
    cols = [d[0] for d in cur.description]
    out: dict[tuple, list[dict]] = {}
    for r in cur.fetchall():
        row = dict(zip(cols, r))
        head = (row["layer"], row["q_head"])
        for c in ("model_id", "layer", "q_head", "k_head", "config_id"):
            row.pop(c)
        out.setdefault(head, []).append(row)
    return out


def _assert_sql_equals_bulk(db: Path, config: RunConfig, analyses: tuple[str, ...]) -> None:
    """Every row the SQL functions return equals, value for value, what compute stored."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        udf.register(con, config)
        calls = ", ".join(f"qkwh_{a}(h) AS {a}" for a in analyses)
        rows = con.execute(
            f"SELECT layer, q_head, {calls} FROM head_inputs('smollm2-135m') AS h "
            "ORDER BY layer, q_head"
        ).fetchall()
        assert len(rows) == N_HEADS
        for i, name in enumerate(analyses):
            decl = registry.get(name)
            stored = {t.name: _stored(con, t.name, t.key, name) for t in decl.tables}
            for layer, q_head, *structs in rows:
                got = dict(structs[i])
                for t in decl.tables:
                    want = stored[t.name].get((layer, q_head), [])
                    if t.per_head:
                        assert len(want) == 1
                        have = [{c: got.pop(c) for c in want[0]}]
                    else:
                        have = sorted(
                            got.pop(t.udf_field), key=lambda r: tuple(r[c] for c in t.key)
                        )
                    assert len(have) == len(want) > 0, (name, t.name, layer, q_head)
                    for h, w in zip(have, want):
                        assert h.keys() == w.keys()
                        for c in w:  # NaN equals NaN; everything else bit for bit
                            same = h[c] == w[c] or (h[c] != h[c] and w[c] != w[c])
                            assert same, (name, t.name, layer, q_head, c, h[c], w[c])
                assert got == {}, f"{name}: fields without a table: {sorted(got)}"
    finally:
        con.close()


# ---------------------------------------------------------------------------------------------
# SQL functions == bulk path on a sliding-window fixture
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def windowed(tmp_path_factory) -> Path:
    """The sample with a sliding window in every file and every file's rows shuffled."""
    root = tmp_path_factory.mktemp("windowed") / "smollm2-135m"
    shutil.copytree(SAMPLE, root)
    rng = np.random.default_rng(7)
    for path in sorted(root.rglob("data.parquet")):
        path.chmod(0o644)
        t = pq.read_table(path)
        perm = rng.permutation(t.num_rows)
        vectors = np.stack(t.column("vector").to_numpy(zero_copy_only=False))[perm]
        write_vectors_file(
            path,
            position=t.column("position").to_numpy()[perm],
            example_id=t.column("example_id").to_numpy()[perm],
            bucket=t.column("bucket").to_numpy()[perm],
            vectors=vectors,
            sliding_window=WINDOW,
        )
    db = root.parent / "wh.duckdb"
    ingest(str(root), warehouse=db)
    return db


def test_sql_functions_equal_the_bulk_path_with_sliding_window_and_cap(windowed: Path):
    config = RunConfig().with_overrides(
        {"max_tokens_per_head": "700", "plasticity.empirical": "true"}
    )
    analyses = (*registry.default_names(), "rope")  # the opt-in rope too (not the jackknife)
    report = compute(windowed, workers=1, config=config, analyses=analyses)
    assert report.failures == [] and report.n_written == N_HEADS
    con = duckdb.connect(str(windowed), read_only=True)
    # the fixture is what it claims: a window on every head, rows not in (example, position)
    # order, more rows than the cap
    assert con.execute(
        "SELECT DISTINCT sliding_window FROM head_inputs('smollm2-135m')"
    ).fetchall() == [(WINDOW,)]
    t = con.execute("SELECT t, q_example FROM head_inputs('smollm2-135m') LIMIT 1").fetchone()
    assert list(zip(t[1], t[0])) != sorted(zip(t[1], t[0])) and len(t[0]) > 700
    assert con.execute("SELECT DISTINCT n_q FROM plasticity_heads").fetchall() == [(700,)]
    con.close()
    _assert_sql_equals_bulk(windowed, config, analyses)  # what compute ran


def test_the_window_changes_what_plasticity_counts(windowed: Path):
    """The window reaches the analysis: without it the eligible keys differ (a function that
    dropped it, as the SQL path once did, would fail the test above)."""
    from qkwh.compute.runner import load_units
    from qkwh.compute.work import head_data, run_analyses
    from qkwh.sniffed.reader import read_file

    con = store.connect(windowed, read_only=True)
    unit = load_units(con, None)[0]
    con.close()
    cfg = RunConfig()
    head = head_data(unit, read_file(unit.q_path), read_file(unit.k_path), cfg)
    assert head.sliding_window == WINDOW
    with_w = run_analyses(head, ("plasticity",), cfg)["plasticity"].tables["plasticity_buckets"]
    no_w = run_analyses(dataclasses.replace(head, sliding_window=None), ("plasticity",), cfg)
    no_w = no_w["plasticity"].tables["plasticity_buckets"]
    assert (with_w["n_eligible_keys"] < no_w["n_eligible_keys"]).any()


# ---------------------------------------------------------------------------------------------
# a toy analysis, declared in one place at run time
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ToyParams:
    scale: float = field(default=1.0, metadata={"gt": 0})
    side: Literal["q", "k"] = "q"


def toy_run(head: HeadData, params: ToyParams, *, seed: int, shared) -> AnalysisResult:
    """Per head: the scaled mean norm of one side; per bucket of that side: its row count."""
    x = head.q if params.side == "q" else head.k
    buckets = head.q_bucket if params.side == "q" else head.k_bucket
    ids, counts = np.unique(buckets, return_counts=True)
    res = AnalysisResult()
    res.add(
        "toy_heads",
        {
            "n_rows": np.array([len(x)]),
            "mean_norm": np.array(
                [params.scale * float(np.linalg.norm(x.astype(np.float64), axis=1).mean())]
            ),
            "side": np.array([params.side], dtype=object),
            "d_seen": np.array([shared["moments"].d]),
        },
    )
    res.add("toy_buckets", {"bucket": ids.astype(np.int64), "n": counts.astype(np.int64)})
    return res


TOY = Analysis(
    name="toy",
    run=toy_run,
    params=ToyParams,
    shared=("moments",),
    tables=(
        Table(
            "toy_heads",
            columns=(
                ("n_rows", "BIGINT"),
                ("mean_norm", "DOUBLE"),
                ("side", "VARCHAR"),
                ("d_seen", "INTEGER"),
            ),
        ),
        Table(
            "toy_buckets",
            key=("bucket",),
            columns=(("bucket", "INTEGER"), ("n", "BIGINT")),
            field="buckets",
        ),
    ),
)


@pytest.fixture
def toy():
    registry.register(TOY)
    yield TOY
    registry.unregister("toy")


def _toy_rows(db: Path) -> dict[str, list]:
    """The toy's rows of its current parameter set (other sets' rows are kept beside them)."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        return {
            t: con.execute(
                f"SELECT * EXCLUDE (config_id) FROM {t} WHERE config_id IN "
                "(SELECT config_id FROM current_config WHERE analysis = 'toy') ORDER BY ALL"
            ).fetchall()
            for t in ("toy_heads", "toy_buckets")
        }
    finally:
        con.close()


def test_toy_analysis_is_computed_written_resumed_and_callable_from_sql(
    toy, tmp_path: Path, monkeypatch
):
    from qkwh.compute import writer
    from qkwh.params import ANALYSES

    assert (*registry.BUILTIN, "toy") == ANALYSES and "toy_buckets" in store.COMPUTE_TABLES
    assert writer.ANALYSIS_TABLES["toy"] == ("toy_heads", "toy_buckets")
    db = tmp_path / "wh.duckdb"
    ingest(str(SAMPLE), warehouse=db)

    # an interrupted first run keeps whole heads only ...
    real, real_runs = store.insert_columns, store.insert_head_runs
    calls = {"n": 0}

    def count() -> None:  # every insert, result tables and head_runs
        calls["n"] += 1
        if calls["n"] == 5:  # inside the second batch's transaction (batches of 1, 4, 16 heads)
            raise KeyboardInterrupt

    def interrupting(con, table, columns):
        count()
        return real(con, table, columns)

    def interrupting_runs(con, runs, computed_at):
        count()
        return real_runs(con, runs, computed_at)

    monkeypatch.setattr(store, "insert_columns", interrupting)
    monkeypatch.setattr(store, "insert_head_runs", interrupting_runs)
    with pytest.raises(KeyboardInterrupt):
        compute(db, workers=1, analyses=("toy",))
    monkeypatch.setattr(store, "insert_columns", real)
    monkeypatch.setattr(store, "insert_head_runs", real_runs)
    con = store.connect(db, read_only=True)
    done = con.execute("SELECT count(*) FROM head_runs WHERE analysis = 'toy'").fetchone()[0]
    assert 0 < done < N_HEADS
    assert (
        con.execute("SELECT count(DISTINCT (layer, q_head)) FROM toy_buckets").fetchone()[0] == done
    )
    con.close()

    # ... and the next run resumes: only the missing heads are computed
    report = compute(db, workers=1, analyses=("toy",))
    assert report.failures == [] and report.n_written == N_HEADS - done
    con = store.connect(db, read_only=True)
    heads = con.execute(
        "SELECT layer, q_head, n_rows, side, d_seen FROM toy_heads ORDER BY 1, 2"
    ).fetchall()
    sizes = {
        (layer, h): n
        for layer, h, n in con.execute("SELECT layer, q_head, n_q FROM heads").fetchall()
    }
    assert [(layer, h, n) for layer, h, n, _, _ in heads] == [
        (layer, h, sizes[(layer, h)]) for layer, h in sorted(sizes)
    ]
    assert {(s, d) for *_, s, d in heads} == {("q", 64)}
    # the bucket rows add up to the head's rows; the run is recorded with its parameters
    assert (
        con.execute(
            "SELECT count(*) FROM (SELECT layer, q_head, sum(n) AS n FROM toy_buckets GROUP BY ALL) b "
            "JOIN toy_heads USING (layer, q_head) WHERE b.n <> n_rows"
        ).fetchone()[0]
        == 0
    )
    params = con.execute("SELECT params_json FROM run_config WHERE analysis = 'toy'").fetchone()[0]
    assert '"toy": {"scale": 1.0, "side": "q"}' in params
    con.close()
    first = _toy_rows(db)

    # unchanged: nothing to do; the built-in analyses are unaffected by the toy
    assert compute(db, workers=1, analyses=("toy",)).n_planned == 0

    # callable from SQL, equal to what was written
    _assert_sql_equals_bulk(db, RunConfig(), ("toy",))

    # a changed toy parameter recomputes the toy, through the CLI, in worker processes
    r = runner.invoke(app, ["compute", "-w", str(db), "-a", "toy", "-p", "toy.scale=2", "-j", "2"])
    assert r.exit_code == 0, r.output
    assert f"computed {N_HEADS} head(s)" in r.output
    second = _toy_rows(db)
    con = duckdb.connect(str(db), read_only=True)
    assert (
        con.execute("SELECT count(DISTINCT config_id) FROM toy_heads").fetchone()[0] == 2
    )  # both sets kept
    con.close()
    assert second["toy_buckets"] == first["toy_buckets"]
    np.testing.assert_allclose(
        [r[5] for r in second["toy_heads"]], [2 * r[5] for r in first["toy_heads"]], rtol=1e-15
    )
    _assert_sql_equals_bulk(db, load_run_config(params=["toy.scale=2"]), ("toy",))


def test_toy_parameters_are_validated_and_reingest_clears_its_rows(toy, tmp_path: Path):
    db = tmp_path / "wh.duckdb"
    ingest(str(SAMPLE), warehouse=db)
    r = runner.invoke(app, ["compute", "-w", str(db), "-a", "toy", "-p", "toy.side=v"])
    assert r.exit_code == 2 and "toy.side must be one of q, k; got 'v'" in r.stderr
    r = runner.invoke(app, ["compute", "-w", str(db), "-a", "toy", "-p", "toy.scale=-1"])
    assert r.exit_code == 2 and "toy.scale must be > 0; got -1.0" in r.stderr
    r = runner.invoke(app, ["compute", "-w", str(db), "-a", "toy", "-p", "toy.nope=1"])
    assert r.exit_code == 2 and "unknown parameter 'toy.nope'" in r.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("toy:\n  scale: fast\n")
    r = runner.invoke(app, ["compute", "-w", str(db), "-a", "toy", "-c", str(bad)])
    assert r.exit_code == 2 and "toy.scale must be a number; got 'fast'" in r.stderr
    assert compute(db, workers=1, analyses=("toy",)).n_written == N_HEADS
    # a re-ingest with another context drops every result of the model, the toy's included
    con = store.connect(db)
    con.execute("UPDATE models SET context_length = 4096, source_fingerprint = 'older'")
    con.close()
    ingest(str(SAMPLE), warehouse=db)
    assert _toy_rows(db) == {"toy_heads": [], "toy_buckets": []}


def test_without_the_toy_nothing_knows_it(tmp_path: Path):
    assert "toy" not in registry.names()
    with pytest.raises(ValueError, match="unknown run-config key 'toy'"):
        RunConfig.from_dict({"toy": {"scale": 2.0}})
    db = tmp_path / "wh.duckdb"
    ingest(str(SAMPLE), warehouse=db)
    r = runner.invoke(app, ["compute", "-w", str(db), "-a", "toy"])
    assert (
        r.exit_code == 2
        and "unknown analysis 'toy'; choose from pca, rotation, plasticity" in r.stderr
    )


def test_bad_declarations_are_refused():
    base = dict(
        run=toy_run, params=ToyParams, tables=(Table("toy_heads", columns=(("x", "DOUBLE"),)),)
    )
    cases = [
        (dict(base, name="Toy"), "use lower-case"),
        (dict(base, name="toy", params=dict), "params must be a dataclass"),
        (dict(base, name="toy", tables=()), "no output table"),
        (dict(base, name="toy", shared=("nope",)), "unknown shared precomputation"),
        (
            dict(base, name="toy", tables=(Table("t", columns=(("layer", "INTEGER"),)),)),
            "added by qkwh",
        ),
        (
            dict(base, name="toy", tables=(Table("head_runs", columns=(("x", "DOUBLE"),)),)),
            "one of qkwh's own",
        ),
        (
            dict(base, name="toy", tables=(Table("t", key=("b",), columns=(("x", "DOUBLE"),)),)),
            "not declared",
        ),
        (
            dict(
                base,
                name="toy",
                tables=(Table("t", columns=(("x", "DOUBLE); DROP TABLE models; --"),)),),
            ),
            "bad column declaration",
        ),
    ]
    for kwargs, message in cases:
        with pytest.raises(ValueError, match=message):
            registry.register(Analysis(**kwargs))
    with pytest.raises(ValueError, match="belong to pca"):
        registry.register(
            Analysis(
                name="toy",
                run=toy_run,
                params=ToyParams,
                tables=(Table("pca_heads", columns=(("x", "DOUBLE"),)),),
            )
        )
    with pytest.raises(ValueError, match="already registered"):
        registry.register(registry.get("pca"))
    with pytest.raises(ValueError, match="must be registered before it"):
        registry.register(Analysis(**dict(base, name="toy", uses=("nosuch",))))
    with pytest.raises(ValueError, match="uses must name other analyses"):
        registry.register(Analysis(**dict(base, name="toy", uses=("toy",))))
    assert registry.names() == registry.BUILTIN


def test_run_config_sections_follow_the_registry():
    cfg = RunConfig()
    assert cfg.to_dict().keys() == {"seed", "max_tokens_per_head", *registry.BUILTIN}
    assert cfg.plasticity is cfg.params_of("plasticity") and cfg.plasticity.cov_mode == "full"
    with pytest.raises(AttributeError):
        cfg.nonsense  # noqa: B018
    # the shipped YAML has exactly the registered sections and their defaults
    assert load_run_config() == cfg
    for bad, message in (
        ({"seed": "x"}, "seed must be an integer"),
        ({"plasticity": {"orientation": "yes"}}, "plasticity.orientation must be true or false"),
        ({"rotation": {"t_active": None}}, "rotation.t_active must be a number"),
        ({"pca": "ten"}, "section 'pca' must be a mapping"),
    ):
        with pytest.raises(ValueError, match=message):
            RunConfig.from_dict(bad)


def test_compute_and_sql_functions_check_a_config_built_in_code(tmp_path: Path):
    from qkwh.analyses.declared.pca import PCAParams
    from qkwh.analyses.declared.rotation import RotationParams
    from qkwh.errors import InputError

    with pytest.raises(
        InputError, match="run config: max_tokens_per_head must be a positive integer; got 0"
    ):
        compute(tmp_path / "never-opened.duckdb", config=RunConfig(max_tokens_per_head=0))
    assert not (tmp_path / "never-opened.duckdb").exists()
    wrong = RunConfig(params=(("pca", RotationParams()),))
    with pytest.raises(ValueError, match="pca: parameters must be a PCAParams, not RotationParams"):
        udf.register(duckdb.connect(), wrong)
    odd = RunConfig(params=(("pca", PCAParams(sign_threshold="high")),))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"pca\.sign_threshold must be a number"):
        odd.validate()


def test_shared_precomputations_are_built_once_with_what_they_need(monkeypatch):
    """pca + rotation + plasticity: the query moments once (plasticity's, and inside the head
    moments); plasticity alone: no key-side moments."""
    from qkwh.analyses import stats
    from qkwh.analyses.types import HeadData

    calls = []
    real = stats.query_moments
    monkeypatch.setattr(stats, "query_moments", lambda *a: calls.append("q") or real(*a))
    rng = np.random.default_rng(0)
    n = 40
    head = HeadData(
        q=rng.standard_normal((n, 4)),
        q_pos=np.arange(n),
        q_example=np.zeros(n, int),
        q_bucket=np.arange(n) // 10,
        k=rng.standard_normal((n, 4)),
        k_pos=np.arange(n),
        k_example=np.zeros(n, int),
        k_bucket=np.arange(n) // 10,
        context_length=64,
        bucket_size=16,
    )
    shared = precompute.precompute(
        head, tuple(registry.get(a) for a in ("pca", "rotation", "plasticity"))
    )
    assert set(shared) == {"query_moments", "key_moments", "moments", "key_layout"} and calls == [
        "q"
    ]
    assert shared["moments"].query is shared["query_moments"]
    assert shared["moments"].kc is shared["key_moments"].kc
    calls.clear()
    assert set(precompute.precompute(head, (registry.get("plasticity"),))) == {
        "query_moments",
        "key_layout",
    }
    assert set(precompute.precompute(head, (registry.get("pca"),))) == {
        "query_moments",
        "key_moments",
        "moments",
    }
    assert calls == ["q", "q"]


def _gqa_heads(n_q_heads: int = 3, n: int = 300, d: int = 8):
    """Query heads of one GQA group: their own query rows, the very same key arrays."""
    from qkwh.analyses.rope import layer_planes
    from qkwh.analyses.types import AttentionFacts
    from qkwh.rope_config import default_inv_freq

    rng = np.random.default_rng(11)
    rope = layer_planes(d, default_inv_freq(1e4, d), bucket_size=64, context_length=320)
    k = rng.standard_normal((n, d)).astype(np.float32)
    k_pos = rng.permutation(n).astype(np.int64)
    k_ex, k_bkt = k_pos % 5, k_pos // 64
    heads = []
    for h in range(n_q_heads):
        q = (rng.standard_normal((n, d)) + 0.3 * h).astype(np.float32)
        heads.append(
            HeadData(
                q=q,
                q_pos=k_pos,
                q_example=k_ex,
                q_bucket=k_bkt,
                k=k,
                k_pos=k_pos,
                k_example=k_ex,
                k_bucket=k_bkt,
                context_length=320,
                bucket_size=64,
                q_head=h,
                rope=rope,
                attention=AttentionFacts("uniform", 64, 8.0),  # what the reach analysis reads
            )
        )
    return heads


def test_key_precomputations_only_read_key_rows():
    """A key-scope builder reads no query-side precomputation (its result is reused across heads)."""
    for name in precompute.KEY_SCOPE:
        assert name in precompute.PRECOMPUTE
        assert set(precompute.PRECOMPUTE_NEEDS.get(name, ())) <= precompute.KEY_SCOPE, name


def test_heads_of_a_kv_group_share_the_key_precomputations(monkeypatch):
    """With one KeyCache for a group, the key moments and layout are built once, and every result
    is bit-identical to analysing each head on its own."""
    from qkwh.analyses import plasticity, stats
    from qkwh.compute.work import run_analyses

    calls = []
    real_km, real_kl = stats.key_moments, plasticity.head_key_layout
    monkeypatch.setattr(stats, "key_moments", lambda *a: calls.append("km") or real_km(*a))
    monkeypatch.setattr(plasticity, "head_key_layout", lambda *a: calls.append("kl") or real_kl(*a))
    config = RunConfig()
    # the jackknife builds its own precomputations for each left-out document group
    every = tuple(a for a in registry.names() if a != "uncertainty")
    heads = _gqa_heads()
    alone = [run_analyses(h, every, config) for h in heads]
    assert calls == ["km", "kl"] * len(heads)
    calls.clear()
    cache = precompute.KeyCache()
    together = [run_analyses(h, every, config, keys=cache) for h in heads]
    assert calls == ["km", "kl"]
    for a, b in zip(alone, together):
        for name in every:
            assert a[name].tables.keys() == b[name].tables.keys()
            for table, cols in a[name].tables.items():
                for col, values in cols.items():
                    np.testing.assert_array_equal(
                        values, b[name].tables[table][col], err_msg=f"{table}.{col}"
                    )
    # equal keys in other arrays are other keys: the cache starts over
    copy = dataclasses.replace(heads[0], k=heads[0].k.copy())
    calls.clear()
    run_analyses(copy, every, config, keys=cache)
    assert calls == ["km", "kl"]


def test_shared_key_precomputations_are_read_only():
    head = _gqa_heads(1)[0]
    shared = precompute.precompute(head, tuple(registry.get(a) for a in registry.names()))
    for name in precompute.KEY_SCOPE:
        arrays = [v for v in vars(shared[name]).values() if isinstance(v, np.ndarray)]
        assert arrays, name
        for a in arrays:
            with pytest.raises(ValueError, match="read-only"):
                a[...] = 0


def test_a_head_without_keys_fails_the_key_moments_with_the_head_checks_message():
    """The key moments are built before the head moments that check the head: they check it first."""
    from qkwh.compute.work import run_analyses

    head = _gqa_heads(1)[0]
    empty = dataclasses.replace(
        head,
        k=head.k[:0],
        k_pos=head.k_pos[:0],
        k_example=head.k_example[:0],
        k_bucket=head.k_bucket[:0],
    )
    with pytest.raises(
        ValueError, match="too few rows: need at least 3 query and 3 key rows, got n_q=300, n_k=0"
    ):
        run_analyses(empty, ("pca", "plasticity"), RunConfig())
    # plasticity alone takes a head without keys (its rows say so, with NaN plasticity)
    buckets = run_analyses(empty, ("plasticity",), RunConfig())["plasticity"].tables[
        "plasticity_buckets"
    ]
    assert (buckets["n_eligible_keys"] == 0).all() and np.isnan(buckets["ap_bucket"]).all()


def test_an_analysis_that_uses_another_gets_its_parameters_and_fingerprint(tmp_path: Path):
    """``uses``: the used analysis's section reaches the function and the parameter fingerprint
    (changing plasticity's parameters recomputes the user, not the other way round)."""
    seen: list[dict] = []

    def user_run(head, params, *, seed, shared, uses):
        seen.append(uses)
        res = AnalysisResult()
        res.add("user_heads", {"p": np.array([uses["plasticity"].num_pairs_per_bucket])})
        return res

    user = Analysis(
        name="user",
        run=user_run,
        params=ToyParams,
        uses=("plasticity",),
        tables=(Table("user_heads", columns=(("p", "BIGINT"),)),),
    )
    registry.register(user)
    try:
        base = RunConfig()
        more = RunConfig.from_dict({"plasticity": {"num_pairs_per_bucket": 7}})
        assert "plasticity" in base.analysis_params("user")
        assert base.fingerprint("user", "v") != more.fingerprint("user", "v")
        assert base.fingerprint("plasticity", "v") != more.fingerprint("plasticity", "v")
        assert base.fingerprint("pca", "v") == more.fingerprint("pca", "v")
        db = tmp_path / "wh.duckdb"
        ingest(str(SAMPLE), warehouse=db, model_id="smollm2-135m")
        compute(db, analyses=("user",), config=more, workers=1)
        con = duckdb.connect(str(db), read_only=True)
        try:
            assert con.sql("SELECT DISTINCT p FROM user_heads").fetchall() == [(7,)]
        finally:
            con.close()
        assert seen and all(set(u) == {"plasticity"} for u in seen)
    finally:
        registry.unregister("user")


def test_an_opt_in_analysis_is_left_out_of_the_default_set():
    opt_in = Analysis(
        name="optin",
        run=toy_run,
        params=ToyParams,
        default=False,
        tables=(Table("optin_heads", columns=(("x", "DOUBLE"),)),),
    )
    registry.register(opt_in)
    try:
        assert "optin" in registry.names() and "optin" not in registry.default_names()
        assert registry.default_names() == ("pca", "rotation", "plasticity", "reach")
    finally:
        registry.unregister("optin")
