"""The analysis declarations are the single source of what an analysis is.

* the checked-in generated files (dbt staging models and sources, the column tables of
  docs/tables.md) match the declarations;
* configs/run.yaml holds exactly the declared parameters with their defaults;
* every declared head-level scalar is a documented column of the dbt mart head_metrics;
* a toy analysis declared here, and nowhere else, shows up in the warehouse DDL, `qkwh status`,
  `qkwh models`, the dbt staging and sources output and the docs output (docs/extending.md).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pytest
import yaml

from qkwh import generate, status, store
from qkwh.analyses import registry
from qkwh.analyses.registry import Analysis, Column, Table
from qkwh.ingest import ingest
from qkwh.params import RunConfig
from qkwh.paths import DBT_PROJECT_DIR, RUN_CONFIG_YAML, SCHEMA_SQL
from tests.conftest import SAMPLE

RUN_WIDE = {"executor", "ray_address"}  # where compute runs: not a parameter of any result


def test_generated_files_match_the_declarations():
    assert generate.stale_files() == [], "run `python -m qkwh.generate` and commit the result"


def test_a_changed_declaration_makes_the_generated_files_stale(monkeypatch):
    pca = registry.get("pca")
    heads = pca.tables[0]
    renamed = dataclasses.replace(
        heads,
        columns=tuple(
            dataclasses.replace(c, description="something else") if c.name == "ev1" else c
            for c in heads.columns
        ),
    )
    monkeypatch.setitem(
        registry._REGISTRY, "pca", dataclasses.replace(pca, tables=(renamed, *pca.tables[1:]))
    )
    assert set(generate.stale_files()) == {
        "dbt_project/models/staging/_sources.yml",
        "dbt_project/models/staging/stg_pca_heads.yml",
        "docs/tables.md",
    }


def test_a_changed_metric_declaration_makes_the_catalogue_stale(monkeypatch):
    """The dbt metric catalogue follows the declared metrics: a metric no longer compared leaves
    the comparison list, and generate --check fails until it is regenerated."""
    rotation = registry.get("rotation")
    metrics = tuple(
        dataclasses.replace(m, compared=False) if m.name == "bias_strength" else m
        for m in rotation.metrics
    )
    monkeypatch.setitem(
        registry._REGISTRY, "rotation", dataclasses.replace(rotation, metrics=metrics)
    )
    assert generate.stale_files() == ["dbt_project/macros/declared_metrics.sql"]
    compared = generate.metrics_macro().split("declared_comparison_metrics")[1]
    assert '"bias_strength"' not in compared and '"abs_r_k_a"' in compared
    assert generate.main(["--check"]) == 1


def test_every_staged_table_has_generated_properties():
    """Each staging view of an analysis table has its .yml, with one table_checks test of its
    key, its model_id reference and the declared ranges and not-null columns."""
    for a in registry.analyses():
        for t in a.tables:
            path = generate.STAGING_DIR / f"stg_{t.name}.yml"
            assert path.exists() == t.staged, t.name
            if not t.staged:
                continue
            model = yaml.safe_load(path.read_text())["models"][0]
            assert [c["name"] for c in model["columns"]] == [
                *("model_id", "layer", "q_head", "k_head", "head_label"),
                *(c.name for c in t.columns),
                "config_id",
            ]
            (test,) = model["data_tests"]
            checks = test["table_checks"]["arguments"]
            assert checks["primary_key"] == ["model_id", "layer", "q_head", *t.key]
            assert checks["relationships"] == {
                "model_id": {"to": "ref('stg_models')", "field": "model_id"}
            }
            assert checks.get("in_range", {}) == {
                c.name: list(c.range) for c in t.columns if c.range is not None
            }
            assert checks.get("not_null", []) == [c.name for c in t.columns if c.not_null]


def test_a_metric_declaration_is_checked():
    from qkwh.analyses.declaration import ModelMetric

    base = registry.get("pca")
    for bad, message in (
        (ModelMetric("x", agg="mode"), "agg 'mode'"),
        (ModelMetric("x", agg="derived"), "names its rule"),
        (ModelMetric("x", rule="plasticity_profile"), "names its rule"),
        (ModelMetric("x", agg="derived", rule="nosuch"), "unknown rule"),
        (ModelMetric("x y"), "metric name"),
    ):
        with pytest.raises(ValueError, match=message):
            dataclasses.replace(base, name="toycheck", metrics=(bad,)).check()
    twice = (ModelMetric("x"), ModelMetric("x"))
    with pytest.raises(ValueError, match="declared twice"):
        dataclasses.replace(base, name="toycheck", metrics=twice).check()
    clash = dataclasses.replace(
        base,
        name="toyclash",
        tables=(registry.Table("toyclash_heads", columns=(("v", "DOUBLE"),)),),
        metrics=(ModelMetric("bias_strength"),),
    )
    with pytest.raises(ValueError, match="belong to rotation"):
        registry.register(clash)


def test_schema_sql_holds_no_analysis_table():
    ddl = SCHEMA_SQL.read_text()
    created = set(re.findall(r"CREATE TABLE IF NOT EXISTS (\w+)", ddl))
    assert created and not created & set(registry.result_tables())


def test_run_yaml_holds_exactly_the_declared_parameters_and_defaults():
    shipped = yaml.safe_load(RUN_CONFIG_YAML.read_text())
    params = {k: v for k, v in shipped.items() if k not in RUN_WIDE}
    assert params == RunConfig().to_dict()
    assert list(params) == ["seed", "max_tokens_per_head", *registry.names()]


def test_declared_head_metrics_are_columns_of_the_head_metrics_mart():
    mart = yaml.safe_load((DBT_PROJECT_DIR / "models" / "marts" / "head_metrics.yml").read_text())
    documented = {
        c["name"] for m in mart["models"] if m["name"] == "head_metrics" for c in m["columns"]
    }
    declared = {c for a in registry.analyses() for c in a.head_metrics}
    assert declared and declared <= documented, sorted(declared - documented)


def test_every_column_is_described_with_a_unit_for_numbers():
    for t in registry.tables():
        for c in t.columns:
            assert c.description, (t.name, c.name)
            if c.is_float:
                assert c.unit, (t.name, c.name)
        assert t.grain and t.description, t.name


# ---------------------------------------------------------------------------------------------
# a toy analysis, declared here only (docs/extending.md)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NormsParams:
    scale: float = field(default=1.0, metadata={"gt": 0})


NORMS = Analysis(
    name="norms",
    run="tests.test_declarations:_never_run",
    params=NormsParams,
    title="Mean vector norms of the queries and keys",
    tables=(
        Table(
            "norms_heads",
            grain="one row per head",
            description="Mean norms per head.",
            columns=(
                Column(
                    "mean_norm_q", "DOUBLE", "vector units", "mean query norm", head_metric=True
                ),
                Column("mean_norm_k", "DOUBLE", "vector units", "mean key norm"),
            ),
        ),
        Table(
            "norms_buckets",
            key=("q_bucket",),
            field="buckets",
            grain="one row per head and query bucket",
            description="Mean query norm per bucket.",
            columns=(
                Column("q_bucket", "INTEGER", "", "query bucket"),
                Column(
                    "flagged", "BOOLEAN", "", "a flag the staging view defaults", null_as="false"
                ),
                Column("mean_norm", "DOUBLE", "vector units", "mean query norm in the bucket"),
            ),
        ),
    ),
)


@pytest.fixture
def norms():
    registry.register(NORMS)
    yield NORMS
    registry.unregister("norms")


def test_a_toy_analysis_declared_once_is_everywhere(norms, tmp_path: Path):
    # the warehouse DDL: created on a writable open, head key first, config_id last
    db = tmp_path / "wh.duckdb"
    ingest(str(SAMPLE), warehouse=db)
    con = store.connect(db)
    try:
        cols = con.execute("DESCRIBE norms_buckets").fetchall()
        assert [(c[0], c[1], c[2]) for c in cols] == [
            ("model_id", "VARCHAR", "NO"),
            ("layer", "INTEGER", "NO"),
            ("q_head", "INTEGER", "NO"),
            ("k_head", "INTEGER", "NO"),
            ("q_bucket", "INTEGER", "NO"),
            ("flagged", "BOOLEAN", "YES"),
            ("mean_norm", "DOUBLE", "YES"),
            ("config_id", "VARCHAR", "NO"),
        ]
        assert "norms_heads" in store.compute_tables()
        # `qkwh status` and `qkwh models`: a column for the toy
        models, _ = status.status(con)
        columns, rows = status.status_table(models)
        assert columns[4:-1] == [*registry.BUILTIN, "norms"]  # the built-ins, in order
        assert rows[0][columns.index("norms")] == "-"  # nothing computed yet
        columns, rows = status.models_overview(con)
        assert columns[-len(registry.BUILTIN) - 2 :] == [*registry.BUILTIN, "norms", "warnings"]
        assert rows[0][columns.index("norms")] == 0
    finally:
        con.close()
    # the run config has its section
    assert RunConfig().norms == NormsParams()
    # dbt: a staging view per table, the sources with the key test and the column descriptions
    models = generate.staging_models()
    sql = models["stg_norms_buckets.sql"]
    assert (
        "{{ source('qkwh', 'norms_buckets') }}" in sql and "is_current_config('t', 'norms')" in sql
    )
    assert (
        "{{ finite('mean_norm') }} as mean_norm" in sql
        and "coalesce(flagged, false) as flagged" in sql
    )
    assert "stg_norms_heads.sql" in models
    sources = yaml.safe_load("tables:\n" + generate.sources_part())["tables"]
    toy = {t["name"]: t for t in sources}["norms_buckets"]
    assert toy["data_tests"][0]["table_checks"]["arguments"]["unique_combination"] == [
        "model_id",
        "layer",
        "q_head",
        "config_id",
        "q_bucket",
    ]
    assert [c["name"] for c in toy["columns"]] == ["q_bucket", "flagged", "mean_norm"]
    # the docs: its section and column tables
    docs = generate.docs_part()
    assert "### Analysis `norms`" in docs and "#### `norms_buckets`" in docs
    assert "| `mean_norm_q` | DOUBLE | vector units | mean query norm (in `head_metrics`) |" in docs
    # and the checked-in files now lag behind: the generator would add the toy
    stale = generate.stale_files()
    assert {
        "dbt_project/models/staging/stg_norms_heads.sql",
        "dbt_project/models/staging/_sources.yml",
        "docs/tables.md",
    } <= set(stale)


def test_the_generated_staging_models_select_every_declared_column(tmp_path: Path):
    """The staging views run on a warehouse (dbt's Jinja macros replaced by their SQL)."""
    db = tmp_path / "wh.duckdb"
    ingest(str(SAMPLE), warehouse=db)
    con = duckdb.connect(str(db))
    try:
        for a in registry.analyses():
            for t in a.tables:
                if not t.staged:
                    continue
                sql = generate.staging_sql(a, t)
                sql = "\n".join(line for line in sql.splitlines() if not line.startswith("--"))
                sql = re.sub(
                    r"\{\{ head_label\('layer', 'q_head'\) \}\}",
                    "'L' || layer || 'H' || q_head",
                    sql,
                )
                sql = re.sub(r"\{\{ finite\('(\w+)'\) \}\}", r"\1", sql)
                sql = re.sub(r"\{\{ source\('qkwh', '(\w+)'\) \}\}", r"\1", sql)
                sql = re.sub(r"\{\{ is_current_config\('t', '\w+'\) \}\}", "true", sql)
                sql = re.sub(r"\{\{ uses_are_current\('t', '\w+', \[[^]]*\]\) \}\}", "true", sql)
                names = [d[0] for d in con.execute(sql).description]
                assert names == [*registry.HEAD_KEY, "head_label", *t.column_names, "config_id"], (
                    t.name
                )
    finally:
        con.close()
