"""A new analysis reaches the model level from its declaration alone (docs/extending.md).

The test declares a toy analysis with one model-level metric and one report figure, in the test
only (no file of the repository is edited): its metric appears in the generated dbt catalogue
and comparison list, and after compute and build (on a copy of the dbt project with the
generated files written into it) in model_metric_ci with a bootstrap interval, in
model_comparisons, in `qkwh compare` and in the report.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np
import pytest
from typer.testing import CliRunner

from qkwh import build as build_mod
from qkwh import generate
from qkwh.analyses import registry
from qkwh.analyses.declaration import Analysis, Column, ModelMetric, Table
from qkwh.analyses.types import AnalysisResult, HeadData
from qkwh.cli import app
from qkwh.compare import compare
from qkwh.compute.runner import compute
from qkwh.paths import DBT_PROJECT_DIR
from tests.dbt.conftest import _quiet

pytestmark = pytest.mark.slow

SHAPE = ["--layers", "6", "--q-heads", "2", "--kv-heads", "1", "--head-dim", "16"]
SHAPE += ["--rows", "300", "--examples", "20"]
MODELS = {"toy-a": 1, "toy-b": 2}  # model id -> synth seed


@dataclass(frozen=True)
class ToyParams:
    """A toy: the mean query norm of a head, scaled."""

    scale: float = 1.0


def toy_run(head: HeadData, params: ToyParams, *, seed: int, shared) -> AnalysisResult:
    """Per head: scale x the mean L2 norm of its query vectors (float64)."""
    norms = np.linalg.norm(head.q.astype(np.float64), axis=1)
    res = AnalysisResult()
    res.add("toy_norm_heads", {"q_norm": np.array([params.scale * float(norms.mean())])})
    return res


TOY = Analysis(
    name="toynorm",
    run=toy_run,
    params=ToyParams,
    default=False,
    title="Toy: mean query norm",
    tables=(
        Table(
            "toy_norm_heads",
            description="The head's mean query norm.",
            columns=(Column("q_norm", "DOUBLE", "vector units", "mean |q| of the head"),),
        ),
    ),
    metrics=(
        ModelMetric(
            "toy_q_norm",
            expr="q_norm",
            unit="vector units",
            description="mean over heads of the heads' mean query norm",
            compared=True,
        ),
    ),
)


def _ok(*args: str) -> str:
    r = CliRunner().invoke(app, list(args))
    assert r.exit_code == 0, r.output
    return r.output


@pytest.fixture(scope="module")
def toy_build(tmp_path_factory):
    root = tmp_path_factory.mktemp("toy")
    registry.register(TOY)
    mp = pytest.MonkeyPatch()
    try:
        wh = root / "qkwh.duckdb"
        for model_id, seed in MODELS.items():
            _ok("synth", str(root / model_id), *SHAPE, "--seed", str(seed))
            _ok("ingest", str(root / model_id), "--model-id", model_id, "-w", str(wh))
        # pca gives the layers their bootstrap clusters; the toy is computed beside it
        compute(wh, analyses=("pca", "toynorm"), workers=1)
        project = root / "dbt_project"
        shutil.copytree(DBT_PROJECT_DIR, project)
        written = generate.write_dbt_project(project)
        mp.setattr(build_mod, "DBT_PROJECT_DIR", project)
        mp.setenv("DBT_INDIRECT_SELECTION", "cautious")
        build_mod.build(
            wh,
            select="+model_comparisons +model_metric_ci +model_summary",
            target_dir=root / "target",
            log_sink=_quiet,
            dbt_vars={"n_boot": 200},
        )
        yield wh, project, written
    finally:
        mp.undo()
        registry.unregister("toynorm")


def test_the_declared_metric_is_in_the_generated_catalogue(toy_build):
    _, project, written = toy_build
    macro = (project / "macros" / "declared_metrics.sql").read_text()
    assert '"metric": "toy_q_norm"' in macro and '"source": "stg_toy_norm_heads"' in macro
    compared = macro.split("declared_comparison_metrics")[1]
    assert '"toy_q_norm"' in compared
    staging = project / "models" / "staging"
    assert (staging / "stg_toy_norm_heads.sql").exists()
    assert (staging / "stg_toy_norm_heads.yml").exists()
    assert project / "macros" / "declared_metrics.sql" in written
    # nothing of the repository's own project was touched
    assert "toy_q_norm" not in (DBT_PROJECT_DIR / "macros" / "declared_metrics.sql").read_text()
    assert not (DBT_PROJECT_DIR / "models" / "staging" / "stg_toy_norm_heads.sql").exists()


def test_the_metric_has_an_interval_in_model_metric_ci(toy_build):
    wh, _, _ = toy_build
    con = duckdb.connect(str(wh), read_only=True)
    try:
        rows = con.execute(
            "SELECT model_id, estimate, ci_low, ci_high, metric_group, n_layers "
            "FROM model_metric_ci WHERE metric = 'toy_q_norm' ORDER BY model_id"
        ).fetchall()
        heads = dict(
            con.execute(
                "SELECT model_id, avg(q_norm) FROM toy_norm_heads GROUP BY model_id"
            ).fetchall()
        )
    finally:
        con.close()
    assert [r[0] for r in rows] == sorted(MODELS)
    for model_id, estimate, lo, hi, group, n_layers in rows:
        # the point estimate is the mean over heads of the per-head values
        assert estimate == pytest.approx(heads[model_id], rel=1e-12)
        assert group == "toynorm" and n_layers == 6
        assert lo is not None and hi is not None and lo <= estimate <= hi and lo < hi


def test_the_metric_is_compared_in_the_mart_and_by_qkwh_compare(toy_build):
    wh, _, _ = toy_build
    con = duckdb.connect(str(wh), read_only=True)
    try:
        (diff,) = con.execute(
            "SELECT difference FROM model_comparisons WHERE metric = 'toy_q_norm' "
            "AND model_a = 'toy-a' AND model_b = 'toy-b'"
        ).fetchone()
    finally:
        con.close()
    rows = compare(wh, "toy-b", "toy-a", metrics=["toy_q_norm"])
    assert [r.metric for r in rows] == ["toy_q_norm"]
    assert rows[0].difference == pytest.approx(-diff, rel=1e-12)
    assert rows[0].difference == pytest.approx(rows[0].estimate_a - rows[0].estimate_b, rel=1e-12)
    out = _ok("compare", "toy-a", "toy-b", "-w", str(wh), "-m", "toy_q_norm")
    assert "toy_q_norm" in out


def test_a_figure_declared_in_the_test_draws_the_metric(toy_build, tmp_path: Path):
    import altair as alt

    from qkwh.reports.base import Drawn, Marts
    from qkwh.reports.catalogue import figure, registered, section
    from qkwh.reports.render import render

    wh, _, _ = toy_build

    def toy_forest(marts: Marts) -> Drawn:
        rows = marts.rows("model_metric_ci", "metric = ?", ["toy_q_norm"])
        chart = alt.Chart(alt.Data(values=rows)).mark_point().encode(x="estimate:Q", y="model_id:N")
        return Drawn(chart, f"{len(rows)} models")

    with registered():
        section("Toy", order=99)
        figure(
            "toy-forest",
            section="Toy",
            title="Toy norm per model",
            caption="Mean query norm with its interval.",
            sources=("model_metric_ci",),
        )(toy_forest)
        result = render(wh, out=tmp_path / "report", figures=["toy-forest"])
    drawn = {f.id: f for f in result.figures}
    assert "toy-forest" in drawn, result
    assert "2 models" in drawn["toy-forest"].caption
    assert "toy_q_norm" in drawn["toy-forest"].spec
