"""The second embedded sample, warehouse/sample/smollm2-135m-code: the first sample's model, heads
and capture protocol on another kind of text (Python source code instead of technical prose).
Two model ids of one model, each with its dataset name, ingest side by side."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from qkwh import store
from qkwh.ingest import ingest
from qkwh.models_csv import load_registry
from qkwh.paths import CODE_SAMPLE_DIR, SAMPLE_DIR, SAMPLE_DIRS
from qkwh.sniffed.metadata import read_metadata

FIRST, CODE = SAMPLE_DIR.name, CODE_SAMPLE_DIR.name
GPL_TOKENS = 7658  # the first sample's example 3 is shorter than the context (see its card)


def _files(root: Path) -> dict[str, Path]:
    return {p.parent.name: p for p in sorted(root.glob("l*h*[qk]/data.parquet"))}


@pytest.fixture(scope="module")
def wh(tmp_path_factory) -> Path:
    db = tmp_path_factory.mktemp("samples") / "wh.duckdb"
    for d in SAMPLE_DIRS:  # no --model-id: the folder names are registry ids
        ingest(str(d), warehouse=db)
    return db


def _query(db: Path, sql: str, params: list | None = None) -> list[tuple]:
    con = store.connect(db, read_only=True)
    try:
        return con.execute(sql, params or []).fetchall()
    finally:
        con.close()


def test_second_sample_ingests_cleanly(wh: Path):
    assert (FIRST, CODE) == ("smollm2-135m", "smollm2-135m-code")
    findings = _query(
        wh,
        'SELECT severity, "check", detail FROM ingest_findings WHERE model_id = ? ORDER BY ALL',
        [CODE],
    )
    assert [f for f in findings if f[0] != "info"] == [], findings
    rows = _query(
        wh,
        "SELECT model_id, hf_model, in_registry, n_files, context_length, bucket_size, "
        "sampling_strategy, family FROM models ORDER BY model_id",
    )
    assert rows == [
        (mid, "HuggingFaceTB/SmolLM2-135M-Instruct", True, 22, 8192, 512, "uniform", "SmolLM2")
        for mid in (FIRST, CODE)
    ]


def test_one_model_two_datasets_in_the_registry():
    reg = load_registry()
    a, b = reg[FIRST], reg[CODE]
    assert (a.hf_model, a.hf_revision) == (b.hf_model, b.hf_revision)
    assert a.hf_model == "HuggingFaceTB/SmolLM2-135M-Instruct"
    # every fact of the model and of the capture protocol is the same; only the id differs
    assert {**vars(a), "model_id": None} == {**vars(b), "model_id": None}


def test_each_sample_names_its_dataset():
    assert read_metadata(SAMPLE_DIR).get_str("dataset") == "technical-prose"
    assert read_metadata(CODE_SAMPLE_DIR).get_str("dataset") == "python-source"


def test_same_heads_as_the_first_sample(wh: Path):
    heads = {
        mid: _query(
            wh, "SELECT layer, q_head, k_head FROM heads WHERE model_id = ? ORDER BY ALL", [mid]
        )
        for mid in (FIRST, CODE)
    }
    assert len(heads[FIRST]) == 12 and heads[CODE] == heads[FIRST]
    assert _files(CODE_SAMPLE_DIR).keys() == _files(SAMPLE_DIR).keys()


def test_rope_frequencies_are_the_captured_inv_freq(wh: Path):
    rows = _query(
        wh,
        "SELECT layer, plane, inv_freq, source, layout FROM rope_frequencies WHERE model_id = ? "
        "ORDER BY layer, plane",
        [CODE],
    )
    layers = sorted({int(n[1:3]) for n in _files(CODE_SAMPLE_DIR)})
    assert sorted({r[0] for r in rows}) == layers
    assert {(r[3], r[4]) for r in rows} == {("capture", "half")}
    # the rotary module's float32 inv_freq = theta^(-2i/d), theta 100000, d 64 (32 planes)
    theta = 100000.0 ** (-np.arange(0, 64, 2) / 64)
    for layer in layers:
        got = np.array([r[2] for r in rows if r[0] == layer])
        np.testing.assert_allclose(got, theta, rtol=1e-6)


def test_same_protocol_different_text():
    """Examples 0..3 of both samples are sampled at the same positions (the masks depend on the
    example id, layer and kind only), but their vectors differ: the text differs."""
    first, code = _files(SAMPLE_DIR), _files(CODE_SAMPLE_DIR)
    n_compared = n_equal = 0
    for name, path in code.items():
        t = pq.read_table(path)
        ex = t.column("example_id").to_numpy()
        pos = t.column("position").to_numpy()
        assert sorted(set(ex.tolist())) == list(range(8)), name
        for e in range(8):  # every document reaches the end of the context
            assert pos[ex == e].max() >= 8192 - 512, (name, e)
        f = pq.read_table(first[name])
        fex, fpos = f.column("example_id").to_numpy(), f.column("position").to_numpy()
        for e in range(4):
            mine = (ex == e) & (pos < (GPL_TOKENS if e == 3 else 8192))
            np.testing.assert_array_equal(pos[mine], fpos[fex == e], err_msg=f"{name} example {e}")
            a = np.stack(t.column("vector").to_numpy(zero_copy_only=False)[mine])
            b = np.stack(f.column("vector").to_numpy(zero_copy_only=False)[fex == e])
            n_compared += len(a)
            n_equal += int(np.all(a == b, axis=1).sum())
    assert n_compared > 5000
    assert n_equal < 0.01 * n_compared  # at most a few rows whose tokens so far are the same


def test_a_capture_of_the_model_in_another_folder_needs_a_model_id(sample_copy: Path, tmp_path):
    """The model name no longer picks one registry entry (two datasets of it are registered): a
    capture of it in a folder named otherwise is not silently filed under either sample's id."""
    from qkwh.errors import InputError

    mine = sample_copy.rename(sample_copy.parent / "my-capture")
    db = tmp_path / "wh.duckdb"
    with pytest.raises(InputError) as exc:
        ingest(str(mine), warehouse=db)
    msg = str(exc.value)
    assert "my-capture: unknown model" in msg and "--model-id" in msg
    assert "fits several entries: smollm2-135m, smollm2-135m-code" in msg
    assert not db.exists() or _query(db, "SELECT count(*) FROM models") == [(0,)]
    ingest(str(mine), warehouse=db, model_id="my-capture")
    assert _query(db, "SELECT model_id FROM models") == [("my-capture",)]
