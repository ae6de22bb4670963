"""Exact attention at capture (docs/input-format.md, optional q-file columns): for every kept
query row, the columns equal the model's own attention probabilities (``output_attentions`` with
eager attention), on tiny random Llama, Mistral (sliding window) and Gemma2 (soft-cap and
``query_pre_attn_scalar``) models built here."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from capture_helpers import _randomise, make_tokenizer, need_capture_extra, write_docs

need_capture_extra()

import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from qkwh.capture.run import CaptureSettings, capture  # noqa: E402
from qkwh.capture.sampling import normalize_example_id, stored_example_id  # noqa: E402
from qkwh.sniffed.layout import scan  # noqa: E402

MAX_LEN, M = 96, 16


def build(kind: str, folder: Path) -> Path:
    from transformers import (
        Gemma2Config,
        Gemma2ForCausalLM,
        LlamaConfig,
        LlamaForCausalLM,
        MistralConfig,
        MistralForCausalLM,
    )

    tokenizer, vocab = make_tokenizer()
    torch.manual_seed(7)
    common = dict(
        vocab_size=vocab,
        hidden_size=48,
        intermediate_size=64,
        max_position_embeddings=256,
        bos_token_id=1,
        eos_token_id=2,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
    )
    if kind == "llama":
        model = LlamaForCausalLM(LlamaConfig(**common, tie_word_embeddings=False))
    elif kind == "mistral":
        model = MistralForCausalLM(
            MistralConfig(**common, sliding_window=24, tie_word_embeddings=False)
        )
    else:
        model = Gemma2ForCausalLM(
            Gemma2Config(
                **common,
                query_pre_attn_scalar=40,
                attn_logit_softcapping=3.0,
                final_logit_softcapping=None,
                sliding_window=20,
                layer_types=["sliding_attention", "full_attention"],
            )
        )
    _randomise(model, seed=3)
    # larger q/k so the soft-cap and the scaling matter
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.q_proj.weight.mul_(4.0)
            layer.self_attn.k_proj.weight.mul_(4.0)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def reference(folder: Path, text: str) -> tuple[object, tuple]:
    lm = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
    tok = AutoTokenizer.from_pretrained(folder)
    ids = tok(text, truncation=True, max_length=MAX_LEN, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        out = lm(input_ids=ids, output_attentions=True)
    return lm, tuple(a[0].double().numpy() for a in out.attentions)


@pytest.mark.parametrize("kind", ["llama", "mistral", "gemma2"])
def test_exact_columns_are_the_models_attention(kind, tmp_path):
    folder = build(kind, tmp_path / kind)
    docs = write_docs(tmp_path / "docs.jsonl", 3, min_words=20, max_words=40)
    out = tmp_path / "cap"
    capture(
        CaptureSettings(
            model=str(folder),
            texts=(str(docs),),
            max_length=MAX_LEN,
            bucket_size=M,
            base_rate=4.0,
            heads=100,
            include_sliding=True,
        ),
        out,
    )
    meta = json.loads((out / "_saver_state.json").read_text())["model_metadata"]
    assert meta["sampling_keep_first"] == 4
    lm0 = AutoModelForCausalLM.from_pretrained(folder)
    scale = lm0.model.layers[0].self_attn.scaling
    assert meta["attention_score_scale"] == pytest.approx(scale, rel=1e-12)
    if kind == "gemma2":
        assert scale == pytest.approx(40**-0.5)
        assert meta["attention_logit_softcap"] == 3.0
    else:
        assert "attention_logit_softcap" not in meta
    texts = {
        stored_example_id(normalize_example_id(r["id"])): r["text"]
        for r in map(json.loads, docs.read_text().splitlines())
    }
    refs = {eid: reference(folder, t)[1] for eid, t in texts.items()}
    n_rows = 0
    for f in scan(out).files:
        table = pq.read_table(f.path)
        if f.kind == "k":
            assert "attn_bins" not in table.column_names
            continue
        col = {c: table.column(c).to_pylist() for c in table.column_names if c != "vector"}
        windows = set(col["sliding_window"])
        if kind == "mistral" or (kind == "gemma2" and f.layer == 0):
            assert windows == {24 if kind == "mistral" else 20}
        else:
            assert windows == {None}
        for i, (eid, t) in enumerate(zip(col["example_id"], col["position"])):
            p = refs[eid][f.layer][f.head, t, : t + 1]
            dist = t - np.arange(t + 1)
            bins = np.bincount(dist // M, weights=p, minlength=MAX_LEN // M)
            nz = p[p > 0]
            np.testing.assert_allclose(col["attn_bins"][i], bins, atol=2e-6)
            np.testing.assert_allclose(
                col["attn_distance"][i], (p * dist).sum(), rtol=1e-5, atol=1e-5
            )
            np.testing.assert_allclose(
                col["attn_entropy"][i], -(nz * np.log(nz)).sum(), rtol=1e-5, atol=1e-5
            )
            np.testing.assert_allclose(col["attn_sink"][i], p[:4].sum(), atol=2e-6)
            n_rows += 1
        # the first 4 positions of every document are kept (keep_first)
        for eid in set(col["example_id"]):
            have = {t for e, t in zip(col["example_id"], col["position"]) if e == eid}
            assert {0, 1, 2, 3} <= have
    assert n_rows > 100


def test_every_key_kept_capture_gives_estimate_equal_to_exact(tmp_path):
    """Capture with the ``all`` sampler, ingest, compute ``reach``: the Horvitz-Thompson estimate
    from the stored vectors equals the exact columns (float32 precision), with the recorded
    scaling and soft-cap (Gemma2)."""
    import duckdb

    from qkwh.compute.runner import compute
    from qkwh.ingest import ingest

    folder = build("gemma2", tmp_path / "gemma2")
    docs = write_docs(tmp_path / "docs.jsonl", 3, min_words=20, max_words=40)
    out = tmp_path / "cap"
    capture(
        CaptureSettings(
            model=str(folder),
            texts=(str(docs),),
            max_length=MAX_LEN,
            bucket_size=M,
            sampler="all",
            heads=100,
            include_sliding=True,
        ),
        out,
    )
    db = tmp_path / "wh.duckdb"
    rep = ingest(str(out), warehouse=db, model_id="tiny-gemma2")
    assert not [f for f in rep.findings if f.check == "reach_sampler"]
    report = compute(db, workers=1, analyses=("reach",))
    assert report.failures == [] and report.left_out == []
    con = duckdb.connect(str(db), read_only=True)
    try:
        heads = con.execute(
            "SELECT reach, reach_exact, sink_mass, sink_mass_exact, scaling_source, "
            "n_queries_skipped, entropy_exact FROM reach_heads"
        ).fetchall()
        assert len(heads) == 8
        for r, rx, s, sx, src, skipped, ent in heads:
            assert src == "capture" and skipped == 3  # position 0 of each document
            assert r == pytest.approx(rx, rel=1e-4) and s == pytest.approx(sx, abs=1e-5)
            assert ent > 0
        diff = con.execute(
            "SELECT max(abs(mass - mass_exact)), count(*) FROM reach_buckets"
        ).fetchone()
        assert diff[0] < 1e-5 and diff[1] > 0
    finally:
        con.close()


def test_trained_context_is_recorded_from_the_rope_scaling():
    from transformers import LlamaConfig

    from qkwh.capture.exact import config_metadata

    scaled = LlamaConfig(
        max_position_embeddings=131072,
        rope_parameters={
            "rope_type": "llama3",
            "rope_theta": 5e5,
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
    )
    assert config_metadata(scaled) == {"original_max_position_embeddings": 8192}
    assert config_metadata(LlamaConfig()) == {}
