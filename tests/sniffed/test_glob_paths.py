"""Cataloged paths are read as the files they name, never as glob patterns: a dataset folder
named ``ds[1]`` beside ``ds1`` (whose vectors differ) keeps its own vectors in the ``vectors``
view and in the reports' scatter plots."""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from qkwh import store
from qkwh.ingest import ingest
from qkwh.reports.base import Marts
from qkwh.reports.vectors import head_rows
from qkwh.sniffed.globs import escape_glob
from tests.conftest import SAMPLE


def _copy(dst: Path, scale: float) -> Path:
    shutil.copytree(SAMPLE, dst)
    for p in dst.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    if scale != 1:
        for f in dst.rglob("*.parquet"):
            t = pq.read_table(f)
            vec = t.column("vector").combine_chunks()
            values = pc.multiply(vec.flatten(), pa.scalar(scale, vec.type.value_type))
            scaled = (
                type(vec).from_arrays(values, vec.type.list_size)
                if isinstance(vec, pa.FixedSizeListArray)
                else pa.ListArray.from_arrays(vec.offsets, values)
            )
            t = t.set_column(t.schema.get_field_index("vector"), "vector", scaled.cast(vec.type))
            pq.write_table(t, f, compression="zstd")
    return dst


@pytest.mark.parametrize(
    ("name", "neighbour"), [("ds[1]", "ds1"), ("ds*1", "ds1"), ("ds?1", "dsX1")]
)
def test_a_folder_named_like_a_glob_reads_its_own_files(tmp_path: Path, name: str, neighbour: str):
    plain = _copy(tmp_path / neighbour, scale=2.0)  # what an unescaped pattern would match
    odd = _copy(tmp_path / name, scale=1.0)
    db = tmp_path / "wh.duckdb"
    ingest(str(plain), warehouse=db, model_id="plain")
    ingest(str(odd), warehouse=db, model_id="odd")
    con = store.connect(db, read_only=True)
    try:
        files = con.execute(
            "SELECT path, rows, layer, head, kind FROM files WHERE model_id = 'odd' ORDER BY path"
        ).fetchall()
        assert files and all(name in p for p, *_ in files)
        n = con.execute("SELECT count(*) FROM vectors WHERE model_id = 'odd'").fetchone()[0]
        assert n == sum(r for _, r, *_ in files)
        path, _rows, layer, head, kind = files[0]
        want = np.asarray(pq.read_table(path).column("vector").to_pylist(), dtype=np.float64)
        got = con.execute(
            "SELECT vector FROM vectors WHERE model_id = 'odd' AND layer = ? AND head = ? "
            "AND kind = ? ORDER BY file_row_number",
            [layer, head, kind],
        ).fetchall()
        np.testing.assert_array_equal(np.asarray([g[0] for g in got], dtype=np.float64), want)
        # the report's scatter plots read the same file
        _pos, X = head_rows(Marts(con, ["odd"]), "odd", layer, head, kind, max_points=10**9)
        order = pq.read_table(path).sort_by(
            [("example_id", "ascending"), ("position", "ascending")]
        )
        np.testing.assert_array_equal(
            X, np.asarray(order.column("vector").to_pylist(), dtype=np.float64)
        )
    finally:
        con.close()


def test_escape_glob_matches_exactly_the_file(tmp_path: Path):
    for name in ("a[1]", "a1", "a*b", "aXb", "a?c", "abc"):
        (tmp_path / name).mkdir()
        duckdb.sql(f"COPY (SELECT '{name}' AS x) TO '{tmp_path / name / 'f.parquet'}'")
    con = duckdb.connect()
    for name in ("a[1]", "a*b", "a?c", "a1"):
        rows = con.execute(
            "SELECT x FROM read_parquet(?)", [escape_glob(str(tmp_path / name / "f.parquet"))]
        ).fetchall()
        assert rows == [(name,)]
    assert escape_glob("/plain/path.parquet") == "/plain/path.parquet"
