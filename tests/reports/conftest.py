"""The fixture warehouse for the report tests, built once per test session (the dbt build is the
slow part) through the real pipeline:

* the embedded SmolLM2 sample (registry model, 9 layers: its model values get intervals);
* a small synthetic model ingested with ``--family``/``--label`` (4 layers: fewer than the
  bootstrap's minimum, so its values are drawn without an interval);

both computed with the empirical plasticity estimator, so the Gaussian-vs-empirical figure has
data.  The report is rendered once, with every SQL statement the report layer runs recorded.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.conftest import SAMPLE

MODEL = "smollm2-135m"
SYNTH = "synth-4l"
SYNTH_FAMILY = "Synthetic"
SYNTH_LABEL = "Synthetic 4-layer"
HOSTILE = '</script><!--<script>alert("x")</script>&amp;'  # a label no page may choke on


@pytest.fixture(scope="session")
def report_warehouse(tmp_path_factory) -> Path:
    from qkwh.build import build
    from qkwh.compute.runner import compute
    from qkwh.ingest import ingest
    from qkwh.params import RunConfig
    from qkwh.synth import write_dataset

    root = tmp_path_factory.mktemp("report-wh")
    db = root / "wh.duckdb"
    ingest(str(SAMPLE), warehouse=db)
    synth = write_dataset(
        root / SYNTH, n_layers=4, n_q_heads=2, n_kv_heads=1, d=16, rows_per_file=600, seed=5
    )
    ingest(str(synth), warehouse=db, model_id=SYNTH, family=SYNTH_FAMILY, label=SYNTH_LABEL)
    cfg = RunConfig().with_overrides({"plasticity.empirical": "true"})
    rep = compute(db, workers=1, config=cfg)
    assert rep.failures == [], rep.failures
    build(db, target_dir=root / "dbt-target")
    return db


class RecordingConnection:
    """A DuckDB connection that records (calling module file, SQL) for every statement."""

    def __init__(self, con) -> None:
        self._con = con
        self.log: list[tuple[str, str]] = []

    def _note(self, sql: str) -> None:
        caller = sys._getframe(2).f_code.co_filename  # who called execute / sql
        self.log.append((caller, str(sql)))

    def execute(self, sql, *args, **kw):
        self._note(sql)
        return self._con.execute(sql, *args, **kw)

    def sql(self, sql, *args, **kw):
        self._note(sql)
        return self._con.sql(sql, *args, **kw)

    def __getattr__(self, name):
        return getattr(self._con, name)


@pytest.fixture(scope="session")
def recorded_report(report_warehouse: Path, tmp_path_factory):
    """(ReportResult, [(module file, sql), ...]) of one full render of the fixture warehouse."""
    from qkwh.reports import render as render_mod

    out = tmp_path_factory.mktemp("report") / "latest"
    recorders: list[RecordingConnection] = []
    real_open = render_mod._open

    def recording_open(warehouse):
        rec = RecordingConnection(real_open(warehouse))
        recorders.append(rec)
        return rec

    mp = pytest.MonkeyPatch()
    mp.setattr(render_mod, "_open", recording_open)
    try:
        result = render_mod.render(report_warehouse, out=out, models=None, strict=True)
    finally:
        mp.undo()
    return result, [entry for rec in recorders for entry in rec.log]


@pytest.fixture(scope="session")
def fixture_report(recorded_report):
    return recorded_report[0]


CORPUS_MODELS = 6
CORPUS_COPIES = 4  # the sample's 12 heads, 4 times: 48 heads per model
CORPUS_FAMILIES = ("SmolLM2", "Qwen3", "Llama3.2")


def clone_models(src: Path, db: Path, clones: list[tuple[str, str, str]], copies: int = 1) -> Path:
    """A copy of warehouse ``src`` at ``db`` whose marts (and the collages' files and axes) hold
    only the models of ``clones`` ((model id, label, family) each), every one the sample
    model's rows under its new id, label and family, its heads repeated ``copies`` times under
    new head numbers (q_head + 100 j, same files)."""
    import shutil

    import duckdb

    from qkwh.reports.base import MARTS

    shutil.copy(src, db)
    con = duckdb.connect(str(db))
    try:

        def columns(table: str) -> list[str]:
            return [
                r[0]
                for r in con.execute(
                    "SELECT column_name FROM information_schema.columns WHERE table_schema = 'main' "
                    "AND table_name = ?",
                    [table],
                ).fetchall()
            ]

        ids = [c[0] for c in clones]
        for table in sorted(MARTS) + ["files", "pca_axes", "rotation_axes"]:
            cols = columns(table)
            if "model_id" not in cols:
                continue
            heads = [
                h for h in (("head",) if table == "files" else ("q_head", "k_head")) if h in cols
            ]
            for mid, label, family in clones:
                for j in range(copies if heads else 1):
                    new = ["? AS model_id"]
                    args: list = [mid]
                    if "label" in cols:
                        new.append("? AS label")
                        args.append(label)
                    if "family" in cols:
                        new.append("? AS family")
                        args.append(family)
                    new += [f"{h} + {100 * j} AS {h}" for h in heads]
                    if "head_label" in cols:
                        new.append(f"'L' || layer || 'H' || (q_head + {100 * j}) AS head_label")
                    con.execute(
                        f'INSERT INTO "{table}" BY NAME SELECT * REPLACE ({", ".join(new)}) '
                        f'FROM "{table}" WHERE model_id = ?',
                        [*args, MODEL],
                    )
            con.execute(
                f'DELETE FROM "{table}" WHERE NOT list_contains(?::VARCHAR[], model_id)', [ids]
            )
    finally:
        con.close()
    return db


@pytest.fixture(scope="session")
def corpus_warehouse(report_warehouse, tmp_path_factory) -> Path:
    """A mid-sized corpus for the report's scale tests, in seconds rather than a dbt build: a
    copy of the fixture warehouse whose marts (and the collages' files and axes) hold 6 models
    of 48 heads each, every one the sample model's rows under a new model id, label and family,
    its heads repeated 4 times under new head numbers (q_head + 100 j, same files)."""
    clones = [
        (f"corpus-{i}", f"Corpus model {i}", CORPUS_FAMILIES[i % len(CORPUS_FAMILIES)])
        for i in range(CORPUS_MODELS)
    ]
    db = tmp_path_factory.mktemp("corpus") / "corpus.duckdb"
    return clone_models(report_warehouse, db, clones, CORPUS_COPIES)


@pytest.fixture(scope="session")
def hostile_report(report_warehouse, tmp_path_factory):
    """A report of two models whose labels (and one family) are HOSTILE, with a figure whose
    data hold HOSTILE as a dataset name."""
    import altair as alt

    from qkwh.reports.base import Drawn
    from qkwh.reports.catalogue import figure, registered
    from qkwh.reports.render import render

    root = tmp_path_factory.mktemp("hostile")
    clones = [
        ("evil-a", HOSTILE, "<!--<script>"),
        ("evil-b", "b " + HOSTILE, "SmolLM2"),
    ]
    db = clone_models(report_warehouse, root / "h.duckdb", clones)

    def toy(marts):  # a dataset name (any string in the data) as hostile as the labels
        data = [{"dataset": HOSTILE, "model_id": m, "n": i} for i, m in enumerate(marts.models)]
        return Drawn(alt.Chart(alt.Data(values=data)).mark_bar().encode(x="n:Q", y="dataset:N"))

    with registered():
        figure(
            "toy-hostile",
            section="PCA",
            title="Toy " + HOSTILE,
            caption="Caption " + HOSTILE,
            sources=("model_summary",),
        )(toy)
        return render(
            db,
            out=root / "rep",
            figures=["toy-hostile", "pca-taxonomy", "ap-forest", "ap-heatmap", "pca-rq-rk-scatter"],
            strict=True,
        )
