"""`qkwh ingest --remote` and `--all-branches` against the local Hub stand-in (127.0.0.1, HF_ENDPOINT).

A branch cataloged in place holds the same catalog as a downloaded one (only the paths differ: hf://
URIs), reads a small part of the bytes, serves the `vectors` view through DuckDB, and computes to
the same tables with workers that stream their files from the stand-in.  Missing and truncated
remote files fail with the same one-line errors as local ones.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hub_server import HubStandIn
from typer.testing import CliRunner

from qkwh import store
from qkwh.cli import app
from qkwh.synth import write_dataset
from tests.compute.test_compute import results
from tests.conftest import snapshot

REPO = "viktoroo/sniffed-qk"
BRANCH = "synthetic/remote"  # a '/' in the branch: percent-encoded in the URIs
SOURCE = f"hf://datasets/{REPO}@{BRANCH}"
URI_ROOT = f"hf://datasets/{REPO}@synthetic%2Fremote"
runner = CliRunner()


def _files(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def synth(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("synth") / "syn"
    write_dataset(
        root,
        n_layers=2,
        n_q_heads=4,
        n_kv_heads=2,
        d=64,
        rows_per_file=3000,
        n_examples=8,
        context_length=4096,
        bucket_size=512,
        seed=3,
    )
    return root


def _serve(monkeypatch, branches: dict[str, dict[str, bytes]], **kwargs) -> HubStandIn:
    hub = HubStandIn(REPO, branches, **kwargs).start()
    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    return hub


def _ok(args: list[str]):
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output + r.stderr
    return r


def _rows(db: Path, sql: str) -> list[tuple]:
    con = store.connect(db, read_only=True)
    try:
        return sorted(con.execute(sql).fetchall())
    finally:
        con.close()


@pytest.mark.slow
def test_remote_catalog_equals_the_download_and_computes_the_same_tables(
    synth, hf_env, monkeypatch
):
    served = _files(synth)
    remote_db, local_db = hf_env / "remote.duckdb", hf_env / "downloaded.duckdb"
    hub = _serve(monkeypatch, {BRANCH: served}, page_size=7)  # the listing takes several pages
    try:
        r = _ok(["ingest", SOURCE, "--remote", "--model-id", "syn", "-w", str(remote_db)])
        assert "syn: ingested; 12 files, 36,000 rows, 8 heads (8 with a k file)" in r.output
        _ok(["ingest", SOURCE, "--model-id", "syn", "-w", str(local_db)])  # downloaded

        files_sql = (
            'SELECT config_name, "rows", d, bytes, fingerprint, n_examples, min_position, max_position, '
            "max_bucket, has_pos0, sliding_window, vector_type FROM files"
        )
        assert _rows(remote_db, files_sql) == _rows(local_db, files_sql)
        assert _rows(remote_db, "SELECT * FROM heads") == _rows(local_db, "SELECT * FROM heads")
        facts = "SELECT * EXCLUDE (source, source_kind, root_path, source_fingerprint, ingested_at) FROM models"
        assert _rows(remote_db, facts) == _rows(local_db, facts)
        assert _rows(remote_db, "SELECT source_kind, root_path FROM models") == [
            ("hub_remote", f"hf://datasets/{REPO}@{hub.commit(BRANCH)}")
        ]
        paths = [p for (p,) in _rows(remote_db, "SELECT path FROM files")]
        assert paths[0] == f"{URI_ROOT}/l00h00k/data.parquet" and all(
            p.startswith(URI_ROOT + "/") for p in paths
        )
        checks = 'SELECT severity, "check" FROM ingest_findings WHERE "check" <> \'remote\''
        assert _rows(remote_db, checks) == _rows(local_db, checks)
        assert _rows(
            remote_db, "SELECT detail FROM ingest_findings WHERE \"check\" = 'remote'"
        ) == [
            (
                "read in place on the Hub: footers and integer columns only; NaN, all-zero and identical vectors "
                "are not checked at ingest",
            )
        ]

        # the vectors view reads the hf:// files through the registered fsspec file system
        per_file = (
            "SELECT layer, head, kind, count(*), sum(position), sum(example_id), "
            "round(sum(list_sum(vector)), 3) FROM vectors GROUP BY ALL"
        )
        assert _rows(remote_db, per_file) == _rows(local_db, per_file)
        assert len(_rows(remote_db, per_file)) == 12

        # compute: two worker processes stream their files from the stand-in
        hub.clear_log()
        _ok(["compute", "-w", str(remote_db), "-j", "2"])
        fetched = {r.filename for r in hub.requests if r.method == "GET" and r.filename}
        assert fetched == {k for k in served if k.endswith(".parquet")}
        _ok(["compute", "-w", str(local_db), "-j", "1"])
        assert results(remote_db) == results(
            local_db
        )  # same rows, same config ids, same input fingerprints

        # the same branch again: nothing changes
        before = snapshot(remote_db)
        r = _ok(["ingest", SOURCE, "--remote", "--model-id", "syn", "-w", str(remote_db)])
        assert "syn: unchanged" in r.output
        assert snapshot(remote_db) == before
    finally:
        hub.stop()


def test_reading_a_branch_in_place_reads_footers_and_integer_columns_only(
    synth, hf_env, monkeypatch
):
    from qkwh.sniffed.hub import parse_hub_source
    from qkwh.sniffed.layout import scan
    from qkwh.sniffed.remote import open_branch
    from qkwh.sniffed.validate import scan_files

    served = _files(synth)
    hub = _serve(monkeypatch, {BRANCH: served})
    try:
        branch = open_branch(parse_hub_source(SOURCE))
        assert not [r for r in hub.requests if r.filename]  # listing only, no file read yet
        stats = branch.scan_files()
        per_file = {r.filename: 0 for r in hub.requests if r.filename}
        for r in hub.requests:
            if r.filename:
                per_file[r.filename] += r.bytes_sent
    finally:
        hub.stop()
    # every parquet file was read, each in a few ranged reads of well under a fifth of its bytes
    # (its vectors, 64 float32 a row, are the rest)
    assert set(per_file) == {k for k in served if k.endswith(".parquet")}
    assert all(n < 0.2 * len(served[k]) for k, n in per_file.items()), per_file
    assert all(r.range for r in hub.requests if r.filename)
    # ... and yet knows what reading the whole files locally knows (except NaN checks)
    local = {s.file.config_name: s for s in scan_files(scan(synth))}
    for s in stats:
        mine, theirs = s, local[s.file.config_name]
        for name in (
            "rows",
            "d",
            "bytes",
            "fingerprint",
            "n_examples",
            "min_position",
            "max_position",
            "max_bucket",
            "has_pos0",
            "sliding_window_values",
            "vector_type",
        ):
            assert getattr(mine, name) == getattr(theirs, name), name
        assert (mine.position == theirs.position).all() and (mine.bucket == theirs.bucket).all()


def _error_line(r) -> str:
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    return lines[-1]


def test_truncated_remote_file_fails_like_a_local_one_and_writes_nothing(
    synth, hf_env, monkeypatch
):
    victim = "l01h02q/data.parquet"
    local = hf_env / "syn"
    shutil.copytree(synth, local)
    data = (local / victim).read_bytes()
    (local / victim).write_bytes(data[: len(data) // 2])
    db = hf_env / "wh.duckdb"
    _ok(["ingest", str(synth), "--model-id", "syn", "-w", str(db)])
    before = snapshot(db)
    r_local = runner.invoke(app, ["ingest", str(local), "--model-id", "syn", "-w", str(db)])
    assert r_local.exit_code == 2
    hub = _serve(monkeypatch, {BRANCH: _files(local)})
    try:
        r_remote = runner.invoke(
            app, ["ingest", SOURCE, "--remote", "--model-id", "syn", "-w", str(db)]
        )
    finally:
        hub.stop()
    assert r_remote.exit_code == 2, r_remote.output + r_remote.stderr
    local_line = _error_line(r_local)
    assert f"{(local / victim).resolve()}: not a readable parquet file" in local_line
    assert _error_line(r_remote) == local_line.replace(
        str((local / victim).resolve()), f"{URI_ROOT}/{victim}"
    )
    assert snapshot(db) == before


def test_file_gone_from_the_branch_fails_its_head_like_a_missing_local_file(
    synth, hf_env, monkeypatch
):
    victim = "l01h03q/data.parquet"
    local = hf_env / "syn"
    shutil.copytree(synth, local)
    local_db, remote_db = hf_env / "local.duckdb", hf_env / "remote.duckdb"
    _ok(["ingest", str(local), "--model-id", "syn", "-w", str(local_db)])
    hub = _serve(monkeypatch, {BRANCH: _files(synth)})
    try:
        _ok(["ingest", SOURCE, "--remote", "--model-id", "syn", "-w", str(remote_db)])
        (local / victim).unlink()
        hub.delete(BRANCH, victim)
        r_local = runner.invoke(app, ["compute", "-w", str(local_db), "-a", "pca", "-j", "1"])
        r_remote = runner.invoke(app, ["compute", "-w", str(remote_db), "-a", "pca", "-j", "1"])
    finally:
        hub.stop()
    assert r_local.exit_code == r_remote.exit_code == 1
    failed_local = [line for line in r_local.stderr.splitlines() if line.startswith("failed")]
    failed_remote = [line for line in r_remote.stderr.splitlines() if line.startswith("failed")]
    assert failed_local == [
        f"failed syn L1H3: InputError: {(local / victim).resolve()}: no such file"
    ]
    assert failed_remote == [f"failed syn L1H3: InputError: {URI_ROOT}/{victim}: no such file"]
    # the other heads were written
    assert _rows(remote_db, "SELECT count(*) FROM pca_heads") == [(7,)]


def _registry_branch(tmp: Path, seed: int) -> dict[str, bytes]:
    """A small synthetic capture shaped like the registry's SmolLM3 checkpoints (16/4 heads, d=128)."""
    root = tmp / f"smollm3-{seed}"
    write_dataset(
        root,
        n_layers=1,
        n_q_heads=16,
        n_kv_heads=4,
        d=128,
        rows_per_file=200,
        n_examples=4,
        context_length=4096,
        bucket_size=256,
        seed=seed,
    )
    return _files(root)


def test_all_branches_in_one_command_skipping_unchanged_ones(hf_env, monkeypatch):
    early, late = (
        "smollm3-3b-stage1-step-40000-longbench-pro-128k-plus",
        "smollm3-3b-stage1-step-1200000-longbench-pro-128k-plus",
    )
    unknown = _files(
        Path(
            write_dataset(
                hf_env / "unknown",
                n_layers=1,
                n_q_heads=2,
                n_kv_heads=1,
                d=16,
                rows_per_file=100,
                seed=5,
            )
        )
    )
    branches = {
        early: _registry_branch(hf_env, 1),
        late: _registry_branch(hf_env, 2),
        "feature/unknown-model": unknown,
        "readme-only": {"README.md": b"# notes\n"},
    }
    db = hf_env / "wh.duckdb"
    hub = _serve(monkeypatch, branches)
    try:
        r = runner.invoke(
            app, ["ingest", f"hf://datasets/{REPO}", "--all-branches", "--remote", "-w", str(db)]
        )
        assert r.exit_code == 1, r.output + r.stderr  # two kinds of failure: exit 1
        assert "2 ingested, 0 skipped unchanged, 2 failed" in r.output
        assert (
            f"failed hf://datasets/{REPO}@feature%2Funknown-model: hf://datasets/{REPO}@feature%2Funknown-model: "
            "unknown model" in " ".join(r.stderr.split())
        )
        assert (
            "failed hf://datasets/viktoroo/sniffed-qk@readme-only: branch readme-only of dataset "
            "viktoroo/sniffed-qk has no l??h??{q|k}/data.parquet files"
            in " ".join(r.stderr.split())
        )
        assert _rows(db, "SELECT model_id, source_kind, revision FROM models") == [
            ("smollm3-3b-stage1-step-1200000", "hub_remote", late),
            ("smollm3-3b-stage1-step-40000", "hub_remote", early),
        ]

        # again: the cataloged branches are skipped without reading a file of theirs
        before = snapshot(db)
        hub.clear_log()
        r = runner.invoke(
            app, ["ingest", f"hf://datasets/{REPO}", "--all-branches", "--remote", "-w", str(db)]
        )
        assert "0 ingested, 2 skipped unchanged, 2 failed" in r.output
        assert not [
            q
            for q in hub.requests
            if q.revision in (early, late, hub.commit(early), hub.commit(late))
        ]
        assert snapshot(db) == before

        # one branch changes: only that one is read again
        hub.put(early, "l00h00q/data.parquet", branches[late]["l00h00q/data.parquet"])
        r = runner.invoke(
            app,
            [
                "ingest",
                f"hf://datasets/{REPO}@{early}",
                f"hf://datasets/{REPO}@{late}",
                "--remote",
                "-w",
                str(db),
            ],
        )
        assert r.exit_code == 0, r.output + r.stderr
        assert "smollm3-3b-stage1-step-40000: replaced" in r.output
        assert "1 ingested, 1 skipped unchanged, 0 failed" in r.output
    finally:
        hub.stop()


def test_bad_invocations_name_the_problem(synth, hf_env, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing may be asked of a Hub
    db = hf_env / "wh.duckdb"
    r = runner.invoke(app, ["ingest", str(synth), "--remote", "-w", str(db)])
    assert r.exit_code == 2 and "--remote reads a Hub branch in place" in r.stderr
    r = runner.invoke(app, ["ingest", str(synth), str(synth), "--model-id", "x", "-w", str(db)])
    assert r.exit_code == 2 and "--model-id names one model" in r.stderr
    r = runner.invoke(app, ["ingest", str(synth), "--all-branches", "-w", str(db)])
    assert r.exit_code == 2 and "--all-branches needs a Hub dataset" in " ".join(r.stderr.split())
    r = runner.invoke(
        app, ["ingest", f"hf://datasets/{REPO}@main", "--all-branches", "-w", str(db)]
    )
    assert r.exit_code == 2 and "--all-branches takes the repo without @BRANCH" in " ".join(
        r.stderr.split()
    )
    assert not db.exists()
