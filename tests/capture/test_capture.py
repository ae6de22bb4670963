"""`qkwh capture` end to end on tiny models: files that ingest accepts, positions that follow the
masks, identical bytes for identical settings, resuming after an interruption, text sources,
Hub ids from the cache, and clear errors on bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from capture_helpers import need_capture_extra, write_docs
from typer.testing import CliRunner

from qkwh import store
from qkwh.capture import parts
from qkwh.capture.run import CaptureSettings, capture
from qkwh.capture.sampling import SamplerSpec, keep_mask, normalize_example_id, stored_example_id
from qkwh.cli import app
from qkwh.errors import InputError
from qkwh.sniffed.layout import scan
from qkwh.sniffed.metadata import read_metadata
from qkwh.sniffed.reader import read_file

need_capture_extra()

runner = CliRunner()
SETTINGS = dict(max_length=128, bucket_size=16, base_rate=4.0, heads=5, head_seed=3)


def settings(model: Path, docs: Path | str, **kw) -> CaptureSettings:
    return CaptureSettings(model=str(model), texts=(str(docs),), **{**SETTINGS, **kw})


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def cli_args(model: Path, docs: Path, out: Path, *extra: str) -> list[str]:
    return [
        "capture",
        str(model),
        "--texts",
        str(docs),
        "--out",
        str(out),
        "--max-length",
        "128",
        "--bucket-size",
        "16",
        "--base-rate",
        "4",
        "--heads",
        "5",
        "--head-seed",
        "3",
        *extra,
    ]


@pytest.fixture(scope="module")
def llama_capture(tiny_models, docs, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("cap") / "tiny-llama-cap"
    capture(settings(tiny_models["llama"], docs), out)
    return out


def test_cli_capture_with_ingest_registers_the_model(tiny_models, docs, tmp_path):
    out, db = tmp_path / "tiny-qwen3", tmp_path / "wh.duckdb"
    r = runner.invoke(app, cli_args(tiny_models["qwen3"], docs, out, "--ingest", "-w", str(db)))
    assert r.exit_code == 0, r.output + r.stderr
    assert "capturing examples" in r.stderr and "6/6" in r.stderr  # the progress bar
    assert "tiny-qwen3: ingested" in r.output and "0 warning(s)" in r.output
    con = store.connect(db, read_only=True)
    try:
        model = con.execute(
            "SELECT num_q_heads, num_kv_heads, head_dim, context_length, bucket_size, "
            "sampling_strategy, hf_model FROM models WHERE model_id = 'tiny-qwen3'"
        ).fetchone()
        heads = con.execute(
            "SELECT count(*), bool_and(has_k_file) FROM heads WHERE model_id = 'tiny-qwen3'"
        ).fetchone()
        bad = con.execute(
            "SELECT count(*) FROM ingest_findings WHERE model_id = 'tiny-qwen3' "
            "AND severity <> 'info'"
        ).fetchone()[0]
    finally:
        con.close()
    assert model == (6, 2, 16, 128, 16, "uniform", "tiny-qwen3")
    assert heads == (5, True) and bad == 0


def test_files_have_the_sniffer_schema_and_metadata(llama_capture):
    layout = scan(llama_capture)
    assert len([f for f in layout.files if f.kind == "q"]) == 5
    for f in layout.files:
        schema = pq.read_schema(f.path)
        exact = ["attn_bins", "attn_distance", "attn_entropy", "attn_sink"]  # q files only
        assert schema.names == ["bucket", "example_id", "position", "vector", "sliding_window"] + (
            exact if f.kind == "q" else []
        )
        assert [
            schema.field(c).type for c in ("bucket", "example_id", "position", "sliding_window")
        ] == [pa.int32()] * 4
        assert schema.field("vector").type == pa.list_(pa.float32(), 16)
        assert pq.ParquetFile(f.path).metadata.row_group(0).column(3).compression == "ZSTD"
    meta = read_metadata(llama_capture)
    m = meta.metadata
    assert meta.model_name == "tiny-llama"
    assert (m["sampling_strategy"], m["sampling_bucket_size"], m["sampling_base_rate"]) == (
        "uniform",
        16,
        4.0,
    )
    assert m["sampling_keep_probability"] == 0.25 and m["tokenizer_max_length"] == 128
    assert (m["head_sampling_seed"], m["head_sampling_selected_query_heads"]) == (3, 5)
    assert (m["head_sampling_num_query_heads"], m["head_sampling_num_key_heads"]) == (4, 2)
    assert m["rope_theta"] == 500.0 and m["capture_pre_rope"] == 0 and m["num_examples"] == 6
    total = sum(read_file(f.path).rows for f in layout.files)
    assert sum(meta.bucket_counts.values()) == total
    card = (llama_capture / "README.md").read_text()
    assert "- `sampling_bucket_size`: `16`" in card and f"- `captured_rows`: `{total}`" in card
    assert not (llama_capture / parts.WORK_DIR).exists()


def test_positions_follow_the_masks_shared_by_the_heads_of_a_layer(llama_capture, docs):
    from transformers import AutoTokenizer

    rows = [json.loads(line) for line in docs.read_text().splitlines()]
    tok = AutoTokenizer.from_pretrained(
        json.loads((llama_capture / "_capture_settings.json").read_text())["settings"]["model"]
    )
    length = {
        stored_example_id(normalize_example_id(r["id"])): (
            normalize_example_id(r["id"]),
            len(tok(r["text"], truncation=True, max_length=128)["input_ids"]),
        )
        for r in rows
    }
    spec = SamplerSpec("uniform", 16, 4.0, keep_first=4)  # qkwh capture's default keep-first
    by_layer_kind: dict[tuple[int, str], list] = {}
    for f in scan(llama_capture).files:
        data = read_file(f.path)
        assert set(np.unique(data.example_id)) == set(length)
        for stored, (eid, n) in length.items():
            want = np.flatnonzero(
                keep_mask(spec, example_id=eid, layer=f.layer, kind=f.kind, seq_len=n)
            )
            np.testing.assert_array_equal(data.position[data.example_id == stored], want)
        np.testing.assert_array_equal(data.bucket, data.position // 16)
        by_layer_kind.setdefault((f.layer, f.kind), []).append((data.example_id, data.position))
    for files in by_layer_kind.values():
        for ex, pos in files[1:]:  # every head of a layer and kind: the same rows
            np.testing.assert_array_equal(ex, files[0][0])
            np.testing.assert_array_equal(pos, files[0][1])
    q = next(v for (layer, kind), v in by_layer_kind.items() if kind == "q")
    k = by_layer_kind[(next(layer for (layer, kind) in by_layer_kind if kind == "q"), "k")]
    assert not np.array_equal(q[0][1], k[0][1])  # Q and K masks are drawn independently


@pytest.mark.slow
def test_same_settings_write_identical_bytes(tiny_models, docs, llama_capture, tmp_path):
    again = tmp_path / "again"
    capture(settings(tiny_models["llama"], docs), again)
    assert tree_bytes(again) == tree_bytes(llama_capture)
    other = tmp_path / "other-seed"
    capture(settings(tiny_models["llama"], docs, head_seed=4), other)
    assert tree_bytes(other) != tree_bytes(llama_capture)


def test_interrupted_capture_resumes_to_the_same_bytes(
    tiny_models, docs, llama_capture, tmp_path, monkeypatch
):
    out = tmp_path / "tiny-llama-cap"
    done = []

    def stop_after_two(tokens: int) -> None:
        done.append(tokens)
        if len(done) == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        capture(settings(tiny_models["llama"], docs), out, on_example=stop_after_two)
    assert sorted(p.name for p in (out / parts.WORK_DIR).glob("part-*")) == [
        "part-000000.parquet",
        "part-000001.parquet",
    ]
    with pytest.raises(InputError):  # nothing in the sniffer layout yet: no half-written files
        scan(out)

    # a second interruption in the middle of an example's forward pass
    import qkwh.capture.run as run_mod

    calls = {"n": 0}
    real = run_mod.keep_mask

    def flaky(*a, **kw):
        calls["n"] += 1
        if calls["n"] == 4:
            raise KeyboardInterrupt
        return real(*a, **kw)

    monkeypatch.setattr(run_mod, "keep_mask", flaky)
    with pytest.raises(KeyboardInterrupt):
        capture(settings(tiny_models["llama"], docs), out)
    monkeypatch.setattr(run_mod, "keep_mask", real)
    assert len(list((out / parts.WORK_DIR).glob("part-*"))) == 2
    assert not [p for p in out.rglob("*") if ".tmp-" in p.name]

    seen = []
    rep = capture(
        settings(tiny_models["llama"], docs),
        out,
        on_start=lambda total, already: seen.append((total, already)),
    )
    assert (
        seen == [(6, 2)] and rep.status == "resumed" and rep.n_resumed == 2 and rep.n_examples == 6
    )
    assert tree_bytes(out) == tree_bytes(llama_capture)
    again = capture(settings(tiny_models["llama"], docs), out)
    assert again.status == "unchanged" and tree_bytes(out) == tree_bytes(llama_capture)


def test_resume_refuses_documents_that_changed(tiny_models, tmp_path):
    src = write_docs(tmp_path / "docs.jsonl", 3)
    out = tmp_path / "cap"
    with pytest.raises(KeyboardInterrupt):
        capture(
            settings(tiny_models["llama"], src),
            out,
            on_example=lambda t: (_ for _ in ()).throw(KeyboardInterrupt),
        )
    write_docs(src, 3, seed=99)
    with pytest.raises(InputError, match="document 0 changed since the interrupted run"):
        capture(settings(tiny_models["llama"], src), out)


def test_text_folder_and_parquet_sources(tiny_models, tmp_path):
    folder = tmp_path / "texts"
    folder.mkdir()
    for name, text in (
        ("b.txt", "second document " * 5),
        ("a.md", "first document " * 5),
        ("skip.bin", "x"),
    ):
        (folder / name).write_text(text)
    out = tmp_path / "from-folder"
    rep = capture(settings(tiny_models["llama"], folder, sampler="all"), out)
    assert rep.n_examples == 2
    data = read_file(scan(out).files[0].path)
    assert sorted(np.unique(data.example_id)) == [0, 1]
    assert data.position[data.example_id == 0].max() == len(
        "first document " * 5
    )  # BOS + characters - 1

    table = pa.table({"id": [7, 8], "body": ["alpha " * 9, "beta " * 9]})
    pq.write_table(table, tmp_path / "docs.parquet")
    out2 = tmp_path / "from-parquet"
    capture(
        settings(
            tiny_models["llama"], tmp_path / "docs.parquet", text_column="body", sampler="all"
        ),
        out2,
    )
    assert sorted(np.unique(read_file(scan(out2).files[0].path).example_id)) == [7, 8]
    assert read_metadata(out2).metadata["source_dataset"] == "docs.parquet"


def test_hub_dataset_source_uses_split_and_columns(tiny_models, tmp_path, monkeypatch):
    calls = []

    class FakeDataset(list):
        column_names = ("uid", "body", "other")

    def load_dataset(name, subset, split, revision):
        calls.append((name, subset, split, revision))
        return FakeDataset(
            [
                {"uid": "a", "body": "one two three " * 4, "other": 1},
                {"uid": "b", "body": "four five six " * 4, "other": 2},
            ]
        )

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    out = tmp_path / "hub"
    capture(
        settings(
            tiny_models["llama"],
            "hf://datasets/acme/corpus@v1",
            split="test",
            text_column="body",
            id_column="uid",
            examples=1,
        ),
        out,
    )
    assert calls == [("acme/corpus", None, "test", "v1")]
    meta = read_metadata(out).metadata
    assert (meta["source_dataset"], meta["dataset_split"], meta["num_examples"]) == (
        "acme/corpus",
        "test",
        1,
    )
    assert set(np.unique(read_file(scan(out).files[0].path).example_id)) == {
        stored_example_id(normalize_example_id("a"))
    }
    with pytest.raises(InputError, match="no column 'text'"):
        capture(
            settings(tiny_models["llama"], "hf://datasets/acme/corpus", split="test"),
            tmp_path / "hub2",
        )


def test_log_uniform_capture_passes_ingest(tiny_models, docs, tmp_path):
    out, db = tmp_path / "tiny-log", tmp_path / "wh.duckdb"
    r = runner.invoke(
        app,
        cli_args(
            tiny_models["llama"],
            docs,
            out,
            "--sampler",
            "log_uniform",
            "--bucket-size",
            "8",
            "--ingest",
            "--model-id",
            "tiny-log",
            "-w",
            str(db),
        ),
    )
    assert r.exit_code == 0, r.output + r.stderr
    assert "0 warning(s)" in r.output
    data = read_file(scan(out).files[0].path)
    np.testing.assert_array_equal(
        data.bucket, np.maximum(3, np.floor(np.log2(data.position + 1.0)))
    )
    assert read_metadata(out).metadata["sampling_min_bucket_size"] == 8


@pytest.mark.slow
def test_hub_id_loads_from_the_local_cache_without_network(tiny_models, docs, tmp_path):
    cache = tmp_path / "hf-cache"
    commit = "0123456789abcdef0123456789abcdef01234567"
    snap = cache / "models--acme--tiny-llama" / "snapshots" / commit
    snap.mkdir(parents=True)
    for f in tiny_models["llama"].iterdir():
        (snap / f.name).write_bytes(f.read_bytes())
    (cache / "models--acme--tiny-llama" / "refs").mkdir()
    (cache / "models--acme--tiny-llama" / "refs" / "main").write_text(commit)
    env = {**os.environ, "HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}
    out = tmp_path / "from-hub"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "qkwh.cli",
            "capture",
            "acme/tiny-llama",
            "--texts",
            str(docs),
            "--out",
            str(out),
            "--max-length",
            "64",
            "--bucket-size",
            "16",
            "--heads",
            "2",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert read_metadata(out).model_name == "acme/tiny-llama"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "qkwh.cli",
            "capture",
            "acme/not-cached",
            "--texts",
            str(docs),
            "--out",
            str(tmp_path / "x"),
            "--max-length",
            "64",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert r.returncode == 2 and "acme/not-cached: cannot load" in r.stderr
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize(
    ("case", "extra", "message"),
    [
        ("missing model", {"model": "/no/such/model"}, "/no/such/model: no such model folder"),
        ("not a gguf", {"model": "DOCS"}, "a model file must be a .gguf file"),
        ("empty jsonl", {"texts": "EMPTY"}, "no documents to capture"),
        (
            "bucket",
            {"args": ["--bucket-size", "48"]},
            "--bucket-size 48 does not divide --max-length 128",
        ),
        (
            "sampler",
            {"args": ["--sampler", "zipf"]},
            "sampler must be one of uniform, log_uniform, all",
        ),
        ("model id", {"args": ["--model-id", "x"]}, "--model-id only applies with --ingest"),
        ("dtype", {"args": ["--dtype", "float16"]}, "--dtype must be one of float32, bfloat16"),
    ],
)
def test_bad_input_is_one_line_and_a_non_zero_exit(
    case, extra, message, tiny_models, docs, tmp_path
):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    model = extra.get("model", str(tiny_models["llama"])).replace("DOCS", str(docs))
    texts = str(empty) if extra.get("texts") == "EMPTY" else str(docs)
    out = tmp_path / "out"
    args = [
        "capture",
        model,
        "--texts",
        texts,
        "--out",
        str(out),
        "--max-length",
        "128",
        *extra.get("args", []),
    ]
    r = runner.invoke(app, args)
    assert r.exit_code == 2, (case, r.output, r.stderr)
    assert message in " ".join(r.stderr.split()), (case, r.stderr)
    assert r.stderr.strip().splitlines()[-1].startswith("error:")
    assert r.stderr.count("error:") == 1
    assert not out.exists()


def test_output_folder_guards(tiny_models, docs, llama_capture, tmp_path):
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    r = runner.invoke(app, cli_args(tiny_models["llama"], docs, busy))
    assert r.exit_code == 2 and "is not empty and holds no capture" in r.stderr
    assert sorted(p.name for p in busy.iterdir()) == ["notes.txt"]
    before = tree_bytes(llama_capture)
    r = runner.invoke(
        app, cli_args(tiny_models["llama"], docs, llama_capture) + ["--base-rate", "2"]
    )
    assert r.exit_code == 2 and "other settings (base_rate differ)" in " ".join(r.stderr.split())
    assert tree_bytes(llama_capture) == before


@pytest.mark.slow
def test_killed_capture_resumes_to_the_same_bytes(tiny_models, tmp_path):
    """kill -9 while the capture waits for its third document (a FIFO nobody writes yet): two part
    files are kept, no final file exists, and the same command then finishes the capture with
    exactly the bytes of an uninterrupted run."""
    import signal
    import time

    texts = {f"d{i}.txt": " ".join(["rotary position"] * (10 + 3 * i)) for i in range(3)}
    ref_dir, run_dir = tmp_path / "ref", tmp_path / "run"
    ref_dir.mkdir()
    run_dir.mkdir()
    for name, text in texts.items():
        (ref_dir / name).write_text(text)
        if name != "d2.txt":
            (run_dir / name).write_text(text)
    os.mkfifo(run_dir / "d2.txt")
    common = ["--max-length", "128", "--bucket-size", "16", "--base-rate", "4", "--heads", "3"]
    ref = tmp_path / "cap-ref"
    r = runner.invoke(
        app,
        [
            "capture",
            str(tiny_models["llama"]),
            "--out",
            str(ref),
            *common,
            *[x for n in texts for x in ("--texts", str(ref_dir / n))],
        ],
    )
    assert r.exit_code == 0, r.output + r.stderr

    out = tmp_path / "cap"
    args = [
        sys.executable,
        "-m",
        "qkwh.cli",
        "capture",
        str(tiny_models["llama"]),
        "--out",
        str(out),
        *common,
        *[x for n in texts for x in ("--texts", str(run_dir / n))],
    ]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 240
        while len(list((out / parts.WORK_DIR).glob("part-*.parquet"))) < 2:
            assert proc.poll() is None and time.monotonic() < deadline, (
                "capture ended before it was killed"
            )
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert sorted(p.name for p in (out / parts.WORK_DIR).glob("*")) == [
        "part-000000.parquet",
        "part-000001.parquet",
        "settings.json",
    ]
    assert not list(out.glob("l??h??[qk]"))  # nothing final yet
    (run_dir / "d2.txt").unlink()
    (run_dir / "d2.txt").write_text(texts["d2.txt"])
    r = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "2 done before the interruption" in r.stdout
    got, want = tree_bytes(out), tree_bytes(ref)
    assert sorted(got) == sorted(want)
    for name in want:  # the settings record the text paths, which differ between the two runs
        if name != "_capture_settings.json":
            assert got[name] == want[name], name


def test_bfloat16_capture_is_float32_rounded(tiny_models, docs, llama_capture, tmp_path):
    out = tmp_path / "bf16"
    capture(settings(tiny_models["llama"], docs, dtype="bfloat16"), out)
    assert read_metadata(out).metadata["model_dtype"] == "bfloat16"
    for f in scan(llama_capture).files:
        ref, got = read_file(f.path), read_file(out / f.config_name / "data.parquet")
        np.testing.assert_array_equal(
            got.position, ref.position
        )  # masks do not depend on the dtype
        assert not (
            got.vectors.view(np.uint32) & 0xFFFF
        ).any()  # bfloat16 values, widened to float32
        scale = np.abs(ref.vectors).max()
        np.testing.assert_allclose(got.vectors, ref.vectors, atol=0.08 * scale)
        assert not np.array_equal(got.vectors, ref.vectors)


def test_qk_sniffer_log_strategy_name_is_the_log_uniform_rule(tiny_models, docs, tmp_path):
    """qk-sniffer records its log sampler as "log": ingest reads it as log_uniform buckets."""
    import json

    out, db = tmp_path / "tiny-log2", tmp_path / "wh.duckdb"
    r = runner.invoke(
        app,
        cli_args(tiny_models["llama"], docs, out, "--sampler", "log_uniform", "--bucket-size", "8"),
    )
    assert r.exit_code == 0, r.output + r.stderr
    state_path = out / "_saver_state.json"
    state = json.loads(state_path.read_text())
    state["model_metadata"]["sampling_strategy"] = "log"
    state_path.write_text(json.dumps(state))
    r = runner.invoke(app, ["ingest", str(out), "--model-id", "tiny-log2", "-w", str(db)])
    assert r.exit_code == 0, r.output + r.stderr
    assert "0 warning(s)" in r.output
