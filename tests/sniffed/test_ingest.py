"""`qkwh ingest`: catalog contents, idempotency, atomic replacement, remove, and every bad input.

Every bad input must give one line naming the file and the problem, a non-zero exit code, and
leave the warehouse exactly as it was (compared table by table).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from qkwh import store
from qkwh.ingest import ingest
from tests.conftest import SAMPLE, snapshot
from tests.conftest import qkwh_cli as cli

runner = CliRunner()


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """A warehouse that already holds the embedded sample (so there is something to lose)."""
    path = tmp_path / "wh.duckdb"
    r = cli("ingest", str(SAMPLE), "-w", str(path))
    assert r.exit_code == 0, r.output
    return path


def _rewrite(path: Path, table: pa.Table) -> None:
    pq.write_table(table, path, compression="zstd")


def _read(path: Path) -> pa.Table:
    return pq.read_table(path)


# ------------------------------------------------------------------------------------------
# the good path
# ------------------------------------------------------------------------------------------


def test_catalog_counts_equal_files_and_rows_on_disk(db: Path):
    con = store.connect(db, read_only=True)
    files = sorted(SAMPLE.glob("l*h*[qk]/data.parquet"))
    rows_on_disk = {f.parent.name: pq.ParquetFile(f).metadata.num_rows for f in files}
    got = dict(con.execute("SELECT config_name, rows FROM files").fetchall())
    assert got == rows_on_disk
    assert con.execute("SELECT n_files, n_rows FROM models").fetchone() == (
        len(files),
        sum(rows_on_disk.values()),
    )
    # the vectors view reads the parquet in place: same rows, FLOAT[64] vectors
    assert con.execute("SELECT count(*) FROM vectors").fetchone()[0] == sum(rows_on_disk.values())
    types = dict(
        con.execute(
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_name = 'vectors'"
        ).fetchall()
    )
    assert types["vector"] == "FLOAT[64]"
    # vectors equal the parquet values bit for bit
    q = con.sql(
        "SELECT vector FROM vectors WHERE layer = 0 AND head = 3 AND kind = 'q' "
        "ORDER BY example_id, position"
    ).to_arrow_table()
    ours = np.asarray(q.column(0).combine_chunks().values).reshape(-1, 64)
    theirs = _read(SAMPLE / "l00h03q" / "data.parquet").column("vector").combine_chunks().values
    np.testing.assert_array_equal(ours, np.asarray(theirs).reshape(-1, 64))


def test_heads_follow_the_gqa_rule(db: Path):
    con = store.connect(db, read_only=True)
    rows = con.execute(
        "SELECT layer, q_head, k_head, has_k_file FROM heads ORDER BY 1, 2"
    ).fetchall()
    assert len(rows) == 12
    assert all(k == q // 3 and has for _, q, k, has in rows)
    facts = con.execute(
        "SELECT num_q_heads, num_kv_heads, gqa_ratio, head_dim, context_length, "
        "context_length_rule, bucket_size FROM models"
    ).fetchone()
    assert facts == (9, 3, 3, 64, 8192, "registry", 512)


def test_same_source_twice_changes_nothing(db: Path):
    before = snapshot(db)
    r = cli("ingest", str(SAMPLE), "-w", str(db))
    assert r.exit_code == 0 and "unchanged" in r.output
    assert snapshot(db) == before


def test_changed_source_replaces_the_models_catalog(tmp_path: Path, sample_copy: Path):
    db = tmp_path / "wh.duckdb"
    assert cli("ingest", str(sample_copy), "-w", str(db)).exit_code == 0
    shutil.rmtree(sample_copy / "l29h04q")
    r = cli("ingest", str(sample_copy), "-w", str(db))
    assert r.exit_code == 0 and "replaced" in r.output
    con = store.connect(db, read_only=True)
    assert con.execute("SELECT count(*) FROM heads").fetchone()[0] == 11
    assert (
        con.execute("SELECT count(*) FROM files WHERE config_name = 'l29h04q'").fetchone()[0] == 0
    )
    assert con.execute("SELECT count(*) FROM models").fetchone()[0] == 1


def test_failure_inside_the_transaction_rolls_back(tmp_path: Path, sample_copy: Path, monkeypatch):
    db = tmp_path / "wh.duckdb"
    assert cli("ingest", str(sample_copy), "-w", str(db)).exit_code == 0
    before = snapshot(db)
    shutil.rmtree(sample_copy / "l29h04q")
    real = store.insert_columns

    def failing(con, table, columns):
        if table == "heads":
            raise RuntimeError("disk full (simulated)")
        return real(con, table, columns)

    monkeypatch.setattr(store, "insert_columns", failing)
    with pytest.raises(RuntimeError, match="simulated"):
        ingest(str(sample_copy), warehouse=db)
    assert snapshot(db) == before


def test_remove_deletes_the_model_and_everything_derived(db: Path):
    con = store.connect(db)
    con.execute(
        "INSERT INTO pca_heads (model_id, layer, q_head, k_head, config_id) VALUES ('smollm2-135m', 0, 3, 1, 'x')"
    )
    con.close()
    r = cli("remove", "smollm2-135m", "--yes", "-w", str(db))
    assert r.exit_code == 0, r.output
    snap = snapshot(db)
    assert all(rows == [] for name, rows in snap.items()), {k: len(v) for k, v in snap.items()}
    con = store.connect(db, read_only=True)
    assert con.execute("SELECT count(*) FROM vectors").fetchone()[0] == 0


def test_remove_unknown_model(db: Path):
    before = snapshot(db)
    r = cli("remove", "nope", "-w", str(db))
    assert r.exit_code != 0
    assert "no model 'nope'" in r.stderr
    assert snapshot(db) == before


def test_dataset_without_metadata_or_registry_entry(db: Path, sample_copy: Path):
    renamed = sample_copy.parent / "mystery"
    sample_copy.rename(renamed)
    (renamed / "_saver_state.json").unlink()
    (renamed / "README.md").unlink()
    # no metadata and not in the registry: the head counts (GQA mapping) cannot be known
    line = _bad(db, renamed, "--model-id", "my-model")
    assert "mystery" in line and "number of query and key heads" in line


def test_full_shared_fixture_ingests(tmp_path: Path, shared_fixture: Path):
    db = tmp_path / "wh.duckdb"
    r = cli("ingest", str(shared_fixture), "-w", str(db))
    assert r.exit_code == 0, r.output
    con = store.connect(db, read_only=True)
    files = sorted(shared_fixture.glob("l*h*[qk]/data.parquet"))
    total = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    assert con.execute("SELECT count(*), sum(rows) FROM files").fetchone() == (len(files), total)
    assert con.execute("SELECT count(*) FROM heads").fetchone()[0] == sum(
        1 for f in files if f.parent.name.endswith("q")
    )
    assert con.execute("SELECT count(*) FROM vectors").fetchone()[0] == total
    assert total == 100854  # the fixture card's captured_rows


# ------------------------------------------------------------------------------------------
# bad input: message names the file and the problem, non-zero exit, warehouse unchanged
# ------------------------------------------------------------------------------------------


def _bad(db: Path, source: Path | str, *extra: str):
    before = snapshot(db)
    r = cli("ingest", str(source), "-w", str(db), *extra)
    assert r.exit_code != 0, r.output
    assert snapshot(db) == before
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, r.stderr  # one line that names the file and the problem
    return errors[0]


def test_missing_folder(db: Path, tmp_path: Path):
    line = _bad(db, tmp_path / "nowhere")
    assert "nowhere" in line and "no such folder" in line


def test_folder_that_is_not_a_sniffer_dataset(db: Path, tmp_path: Path):
    (tmp_path / "junk" / "subdir").mkdir(parents=True)
    (tmp_path / "junk" / "notes.txt").write_text("hello")
    line = _bad(db, tmp_path / "junk")
    assert "junk" in line and "not a sniffer dataset" in line


def test_corrupt_parquet(db: Path, sample_copy: Path):
    f = sample_copy / "l07h01q" / "data.parquet"
    f.write_bytes(b"this is not parquet at all" * 100)
    line = _bad(db, sample_copy)
    assert "l07h01q/data.parquet" in line and "not a readable parquet file" in line


def test_truncated_parquet(db: Path, sample_copy: Path):
    f = sample_copy / "l12h03q" / "data.parquet"
    data = f.read_bytes()
    f.write_bytes(data[: len(data) // 2])
    line = _bad(db, sample_copy)
    assert "l12h03q/data.parquet" in line and "parquet" in line


def test_wrong_column_type(db: Path, sample_copy: Path):
    f = sample_copy / "l02h00q" / "data.parquet"
    t = _read(f)
    t = t.set_column(
        t.schema.get_field_index("position"),
        "position",
        pa.array(map(str, t.column("position").to_pylist())),
    )
    _rewrite(f, t)
    line = _bad(db, sample_copy)
    assert "l02h00q/data.parquet" in line and "column position has type string" in line


def test_vector_length_differs_across_rows(db: Path, sample_copy: Path):
    f = sample_copy / "l02h02q" / "data.parquet"
    t = _read(f)
    vecs = t.column("vector").to_pylist()
    vecs[5] = vecs[5][:63]
    t = t.set_column(
        t.schema.get_field_index("vector"), "vector", pa.array(vecs, type=pa.list_(pa.float32()))
    )
    _rewrite(f, t)
    line = _bad(db, sample_copy)
    assert "l02h02q/data.parquet" in line and "vector length differs across rows" in line


def test_vector_length_differs_between_q_and_k(db: Path, sample_copy: Path):
    f = sample_copy / "l00h01k" / "data.parquet"
    t = _read(f)
    vals = np.asarray(t.column("vector").combine_chunks().values).reshape(-1, 64)[:, :32]
    arr = pa.FixedSizeListArray.from_arrays(pa.array(vals.ravel()), 32)
    _rewrite(f, t.set_column(t.schema.get_field_index("vector"), "vector", arr))
    line = _bad(db, sample_copy)
    assert (
        "l00h03q/data.parquet" in line and "l00h01k" in line and "differs from its k file" in line
    )


@pytest.mark.parametrize("bad_value", [np.nan, np.inf])
def test_nan_or_inf_in_vectors(db: Path, sample_copy: Path, bad_value: float):
    f = sample_copy / "l15h02k" / "data.parquet"
    t = _read(f)
    vals = np.asarray(t.column("vector").combine_chunks().values).reshape(-1, 64).copy()
    vals[3, 7] = bad_value
    arr = pa.FixedSizeListArray.from_arrays(pa.array(vals.ravel()), 64)
    _rewrite(f, t.set_column(t.schema.get_field_index("vector"), "vector", arr))
    line = _bad(db, sample_copy)
    assert "l15h02k/data.parquet" in line and "NaN/Inf" in line


def test_bucket_ids_inconsistent_with_positions(db: Path, sample_copy: Path):
    f = sample_copy / "l20h00q" / "data.parquet"
    t = _read(f)
    b = t.column("bucket").to_numpy().copy()
    b[10] += 1
    _rewrite(
        f, t.set_column(t.schema.get_field_index("bucket"), "bucket", pa.array(b.astype(np.int32)))
    )
    line = _bad(db, sample_copy)
    assert "l20h00q/data.parquet" in line and "bucket ids inconsistent" in line


def test_positions_beyond_the_context_length_are_refused(db: Path, sample_copy: Path):
    """Rows at or past L_ctx cannot be placed (their bucket_frac would exceed 1 and fail every
    model's marts at `qkwh build`): ingest refuses the folder and writes nothing."""
    state = sample_copy / "_saver_state.json"
    state.write_text(
        state.read_text().replace('"tokenizer_max_length": 8192', '"tokenizer_max_length": 4096')
    )
    max_pos = max(
        int(pq.read_table(f, columns=["position"]).column("position").to_numpy().max())
        for f in sample_copy.glob("l*/data.parquet")
    )
    assert max_pos >= 4096
    line = _bad(db, sample_copy, "--model-id", "short-context")
    assert "data.parquet" in line and "position >= the context length 4096" in line
    assert "largest position" in line


def _set_vectors(t: pa.Table, vals: np.ndarray) -> pa.Table:
    arr = pa.FixedSizeListArray.from_arrays(
        pa.array(vals.astype(np.float32).ravel()), vals.shape[1]
    )
    return t.set_column(t.schema.get_field_index("vector"), "vector", arr)


def _vectors(t: pa.Table) -> np.ndarray:
    return np.asarray(t.column("vector").combine_chunks().values).reshape(t.num_rows, -1).copy()


def test_duplicate_example_and_position_rows_are_refused(db: Path, sample_copy: Path):
    """Two rows of one token, even with different vectors, would count that token twice."""
    f = sample_copy / "l20h00q" / "data.parquet"
    t = _read(f)
    cols = {name: t.column(name).to_numpy().copy() for name in ("example_id", "position", "bucket")}
    for c in cols.values():
        c[7] = c[3]  # row 7 takes row 3's key (and its bucket, so that only the key is wrong)
    for name, c in cols.items():
        t = t.set_column(
            t.schema.get_field_index(name), name, pa.array(c, t.schema.field(name).type)
        )
    assert not np.array_equal(_vectors(t)[7], _vectors(t)[3])
    _rewrite(f, t)
    line = _bad(db, sample_copy)
    assert "l20h00q/data.parquet" in line and "1 row(s) repeat the (example_id, position)" in line
    assert f"example_id {cols['example_id'][3]}, position {cols['position'][3]}" in line


@pytest.mark.parametrize("fill", [0.0, 0.25], ids=["all zero", "all the same"])
def test_file_whose_vectors_are_all_identical_is_refused(db: Path, sample_copy: Path, fill: float):
    f = sample_copy / "l15h02k" / "data.parquet"
    t = _read(f)
    _rewrite(f, _set_vectors(t, np.full_like(_vectors(t), fill)))
    line = _bad(db, sample_copy)
    what = "all zero" if fill == 0 else "the same vector"
    assert "l15h02k/data.parquet" in line and f"all {t.num_rows} vectors are {what}" in line


def test_a_few_zero_vectors_are_a_stored_warning(tmp_path: Path, sample_copy: Path):
    f = sample_copy / "l15h02k" / "data.parquet"
    t = _read(f)
    vals = _vectors(t)
    vals[[2, 5, 9]] = 0.0
    _rewrite(f, _set_vectors(t, vals))
    db = tmp_path / "wh.duckdb"
    r = cli("ingest", str(sample_copy), "-w", str(db))
    assert r.exit_code == 0, r.output
    con = store.connect(db, read_only=True)
    rows = con.execute(
        "SELECT severity, file, detail FROM ingest_findings WHERE \"check\" = 'zero_vectors'"
    ).fetchall()
    assert rows == [("warning", str(f), f"3 of {t.num_rows} row(s) have an all-zero vector")]


def test_unknown_model_without_model_id(db: Path, sample_copy: Path):
    renamed = sample_copy.parent / "some-capture"
    sample_copy.rename(renamed)
    state = renamed / "_saver_state.json"
    state.write_text(
        state.read_text()
        .replace("HuggingFaceTB/SmolLM2-135M-Instruct", "acme/unknown-7b")
        .replace("smollm2-135m-instruct-q4_1-fixture", "acme-branch")
    )
    (renamed / "README.md").unlink()
    line = _bad(db, renamed)
    assert "some-capture" in line and "unknown model" in line and "--model-id" in line
    # with --model-id it ingests (head counts come from _saver_state.json)
    r = cli("ingest", str(renamed), "--model-id", "acme-7b", "-w", str(db))
    assert r.exit_code == 0, r.output
    con = store.connect(db, read_only=True)
    row = con.execute(
        "SELECT in_registry, context_length, context_length_rule, bucket_size FROM models "
        "WHERE model_id = 'acme-7b'"
    ).fetchone()
    assert row == (False, 8192, "metadata", 512)


def test_q_file_whose_k_file_is_missing_is_a_stored_finding(tmp_path: Path, sample_copy: Path):
    shutil.rmtree(sample_copy / "l23h02k")
    db = tmp_path / "wh.duckdb"
    r = cli("ingest", str(sample_copy), "-w", str(db))
    assert r.exit_code == 0, r.output
    assert "missing_k_file" in r.output and "l23h02k" in r.output
    con = store.connect(db, read_only=True)
    assert con.execute(
        "SELECT has_k_file, n_k FROM heads WHERE layer = 23 AND q_head = 8"
    ).fetchone() == (False, None)
    f = con.execute(
        "SELECT severity, file, detail FROM ingest_findings WHERE \"check\" = 'missing_k_file'"
    ).fetchall()
    assert len(f) == 1 and f[0][0] == "warning" and f[0][1].endswith("l23h08q/data.parquet")


def test_hub_unreachable_with_nothing_cached(db: Path, tmp_path: Path, monkeypatch):
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("HF_HUB_ETAG_TIMEOUT", "2")
    monkeypatch.setenv("HF_HUB_DOWNLOAD_TIMEOUT", "2")
    line = _bad(
        db,
        "hf://datasets/viktoroo/sniffed-qk@qwen3-4b-longbench-pro-128k-plus",
        "--cache-dir",
        str(tmp_path / "hf-cache"),
    )
    assert "viktoroo/sniffed-qk" in line and "qwen3-4b-longbench-pro-128k-plus" in line
    assert "cached" in line


def test_second_process_holding_the_warehouse(db: Path, tmp_path: Path, monkeypatch):
    before = snapshot(db)
    monkeypatch.setenv("QKWH_LOCK_TIMEOUT", "0.5")  # the holder never lets go: no use waiting 10 s
    ready = tmp_path / "ready"
    # the holder keeps the warehouse open until its stdin closes (killed below)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
        import duckdb, pathlib, sys
        con = duckdb.connect({str(db)!r})
        pathlib.Path({str(ready)!r}).write_text("x")
        sys.stdin.read()
    """),
        ],
        stdin=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 300  # generous: the holder only has to import duckdb
        while not ready.exists() and holder.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists(), (
            f"holder process did not open the warehouse (exit code {holder.poll()})"
        )
        r = cli("ingest", str(SAMPLE), "-w", str(db))
        assert r.exit_code == 3, r.output
        assert "locked by another process" in r.stderr and str(db) in r.stderr
    finally:
        holder.kill()
        holder.wait()
    assert snapshot(db) == before


def test_environment_variable_selects_the_warehouse(tmp_path: Path, monkeypatch):
    db = tmp_path / "env.duckdb"
    monkeypatch.setenv("QKWH_WAREHOUSE", str(db))
    r = cli("ingest", str(SAMPLE))
    assert r.exit_code == 0, r.output
    assert db.exists()
    assert os.environ["QKWH_WAREHOUSE"] == str(db)


def test_sliding_window_values_are_cataloged(tmp_path: Path, sample_copy: Path):
    f1 = sample_copy / "l01h06q" / "data.parquet"
    t = _read(f1)
    sw = pa.array(np.full(t.num_rows, 4096, dtype=np.int32))
    _rewrite(f1, t.set_column(t.schema.get_field_index("sliding_window"), "sliding_window", sw))
    f2 = sample_copy / "l01h02k" / "data.parquet"
    t = _read(f2)
    mixed = np.full(t.num_rows, 4096, dtype=np.int32)
    mixed[:5] = 2048
    _rewrite(
        f2,
        t.set_column(t.schema.get_field_index("sliding_window"), "sliding_window", pa.array(mixed)),
    )
    db = tmp_path / "wh.duckdb"
    r = cli("ingest", str(sample_copy), "-w", str(db))
    assert r.exit_code == 0, r.output + r.stderr
    con = store.connect(db, read_only=True)
    assert con.execute(
        "SELECT sliding_window FROM files WHERE config_name = 'l01h06q'"
    ).fetchone() == (4096,)
    assert (
        con.execute("SELECT count(*) FROM files WHERE sliding_window IS NULL").fetchone()[0] == 20
    )
    warn = con.execute(
        "SELECT detail FROM ingest_findings WHERE \"check\" = 'sliding_window' AND severity = 'warning'"
    ).fetchall()
    assert len(warn) == 1 and "2 distinct sliding_window values" in warn[0][0]
    assert con.execute("SELECT count(*) FROM vectors WHERE sliding_window = 4096").fetchone()[0] > 0


def test_remove_keeps_reference_seed_tables(db: Path):
    """dbt seeds (e.g. model_registry) describe models whether or not they are ingested."""
    con = store.connect(db)
    con.execute(
        "CREATE TABLE model_registry AS SELECT 'smollm2-135m' AS model_id, 'SmolLM2' AS family"
    )
    con.execute(
        "CREATE TABLE model_summary AS SELECT 'smollm2-135m' AS model_id, 12 AS n_heads"
    )  # a mart
    con.close()
    assert cli("remove", "smollm2-135m", "--yes", "-w", str(db)).exit_code == 0
    con = store.connect(db, read_only=True)
    assert con.execute("SELECT count(*) FROM model_registry").fetchone()[0] == 1
    assert con.execute("SELECT count(*) FROM model_summary").fetchone()[0] == 0


@pytest.mark.parametrize("column", ["position", "example_id", "bucket"])
def test_a_null_in_an_integer_column_is_one_clear_line(db: Path, sample_copy: Path, column: str):
    """The refusal comes alone: no numpy RuntimeWarning (and its source line) before it."""
    f = sample_copy / "l02h00q" / "data.parquet"
    t = _read(f)
    values = t.column(column).to_pylist()
    values[3] = None
    t = t.set_column(
        t.schema.get_field_index(column), column, pa.array(values, t.schema.field(column).type)
    )
    _rewrite(f, t)
    line = _bad(db, sample_copy)
    assert "l02h00q/data.parquet" in line and f"column {column} has 1 null value(s)" in line
    before = snapshot(db)
    run = subprocess.run(
        [
            sys.executable,
            "-W",
            "default",
            "-c",
            "from qkwh.cli import app; app()",
            "ingest",
            str(sample_copy),
            "-w",
            str(db),
        ],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 2 and snapshot(db) == before
    # nothing but the progress line and the error (however a console may wrap it)
    assert run.stderr.count("error:") == 1 and run.stderr.startswith("reading "), run.stderr
    assert "Warning" not in run.stderr and "astype" not in run.stderr, run.stderr
    before_error = "".join(run.stderr.split("error:")[0].split())
    assert before_error == "".join(f"reading 22 files under {sample_copy}".split()), run.stderr


def _file_size_limit(limit: int):
    """preexec_fn: writes beyond ``limit`` bytes fail with EFBIG (as a full disk fails them with
    ENOSPC) instead of killing the process."""
    import resource
    import signal

    def apply():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


@pytest.mark.parametrize("fresh", [False, True])
def test_a_write_that_fails_is_one_line_and_keeps_the_warehouse(
    db: Path, sample_copy: Path, tmp_path: Path, fresh: bool
):
    """The warehouse's write-ahead log cannot grow past 20 kB (the ingest writes ~50 kB): one
    error line naming the file and the reason, exit 1, the warehouse as it was (a warehouse the
    ingest began to create is removed), and a rerun with room succeeds."""
    target = tmp_path / "new.duckdb" if fresh else db
    before = None if fresh else snapshot(db)
    cmd = [sys.executable, "-c", "from qkwh.cli import app; app()", "ingest", str(sample_copy)]
    cmd += ["-w", str(target), "--model-id", "other"]
    run = subprocess.run(cmd, capture_output=True, text=True, preexec_fn=_file_size_limit(20_000))
    assert run.returncode == 1, run.stderr
    assert "Traceback" not in run.stderr and run.stderr.count("error:") == 1, run.stderr
    text = " ".join(run.stderr.split("error:")[1].split())  # however a console wraps it
    assert f"{target}.wal: cannot write (File too large)" in " ".join(text.split()), run.stderr
    if fresh:
        assert not target.exists() and not Path(f"{target}.wal").exists()
    else:
        assert snapshot(db) == before
    rerun = subprocess.run(cmd, capture_output=True, text=True)
    assert rerun.returncode == 0, rerun.stderr
