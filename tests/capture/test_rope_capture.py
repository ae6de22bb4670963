"""`qkwh capture` records the rotary modules' own inv_freq (per layer type, with attention
scaling, partial rotary factor and layout), and ingest stores exactly those frequencies in
``rope_frequencies``: tiny random models with llama3 and yarn scaling, partial rotary (Phi) and
NoPE layers (SmolLM3)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from capture_helpers import _randomise, make_tokenizer, need_capture_extra

from qkwh import rope_config as RF
from qkwh import store
from qkwh.capture.run import CaptureSettings, capture
from qkwh.ingest import ingest
from qkwh.sniffed.metadata import read_metadata

need_capture_extra()

COMMON = {
    "hidden_size": 64,
    "intermediate_size": 64,
    "max_position_embeddings": 256,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "tie_word_embeddings": False,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
}


def _build(kind: str, folder: Path) -> Path:
    import torch
    import transformers as T

    tokenizer, vocab = make_tokenizer()
    torch.manual_seed(7)
    if kind == "llama3":
        cfg = T.LlamaConfig(
            vocab_size=vocab,
            head_dim=16,
            **COMMON,
            rope_parameters={
                "rope_type": "llama3",
                "rope_theta": 500000.0,
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 64,
            },
        )
        model = T.LlamaForCausalLM(cfg)
    elif kind == "yarn":
        cfg = T.Qwen3Config(
            vocab_size=vocab,
            head_dim=16,
            **COMMON,
            rope_parameters={
                "rope_type": "yarn",
                "rope_theta": 10000.0,
                "factor": 4.0,
                "original_max_position_embeddings": 64,
            },
        )
        model = T.Qwen3ForCausalLM(cfg)
    elif kind == "partial":  # Phi: half of each head's 16 dims rotated
        cfg = T.PhiConfig(
            vocab_size=vocab,
            **{k: v for k, v in COMMON.items() if k != "num_key_value_heads"},
            num_key_value_heads=4,
            partial_rotary_factor=0.5,
            rope_parameters={
                "rope_type": "default",
                "rope_theta": 10000.0,
                "partial_rotary_factor": 0.5,
            },
        )
        model = T.PhiForCausalLM(cfg)
    elif kind == "cohere":  # Cohere: adjacent dims turn together (its rotate_half interleaves)
        cfg = T.CohereConfig(
            vocab_size=vocab,
            **COMMON,
            pad_token_id=0,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        )
        model = T.CohereForCausalLM(cfg)
    elif kind == "glm":  # GLM: interleaved, and only the first half of each head rotates
        cfg = T.GlmConfig(
            vocab_size=vocab,
            head_dim=16,
            **COMMON,
            pad_token_id=0,
            rope_parameters={
                "rope_type": "default",
                "rope_theta": 10000.0,
                "partial_rotary_factor": 0.5,
            },
        )
        model = T.GlmForCausalLM(cfg)
    elif kind == "nope":  # SmolLM3: layer 1 without RoPE
        cfg = T.SmolLM3Config(
            vocab_size=vocab,
            **COMMON,
            no_rope_layers=[1, 0, 1],
            pad_token_id=0,
            rope_parameters={"rope_type": "default", "rope_theta": 2000.0},
        )
        model = T.SmolLM3ForCausalLM(cfg)
    else:
        raise ValueError(kind)
    _randomise(model, seed=3)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def _model_inv_freq(folder: Path) -> np.ndarray:
    from transformers import AutoModelForCausalLM

    lm = AutoModelForCausalLM.from_pretrained(folder)
    (buf,) = [b for name, b in lm.named_buffers() if name.endswith("rotary_emb.inv_freq")]
    return buf.double().numpy()


@pytest.fixture(scope="module")
def docs(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("docs") / "docs.jsonl"
    path.write_text(
        "".join(
            json.dumps({"id": f"d{i}", "text": "rotary position query key " * (6 + i)}) + "\n"
            for i in range(2)
        )
    )
    return path


LAYOUT = {"cohere": "interleaved", "glm": "interleaved"}  # every other kind: half


@pytest.mark.parametrize("kind", ["llama3", "yarn", "partial", "nope", "cohere", "glm"])
def test_capture_records_the_models_own_inv_freq_and_ingest_stores_it(kind, docs, tmp_path):
    folder = _build(kind, tmp_path / f"tiny-{kind}")
    out, db = tmp_path / f"cap-{kind}", tmp_path / "wh.duckdb"
    capture(
        CaptureSettings(
            model=str(folder),
            texts=(str(docs),),
            max_length=64,
            bucket_size=8,
            base_rate=4.0,
            heads=4,
            head_seed=0,
        ),
        out,
    )
    want = _model_inv_freq(folder)
    record = json.loads(read_metadata(out).metadata["rope_frequencies"])
    layout = LAYOUT.get(kind, "half")
    assert list(record["by_type"]) == ["all"] and record["layout"] == layout
    got = np.asarray(record["by_type"]["all"]["inv_freq"])
    np.testing.assert_array_equal(got, want)  # exactly the model's vector (float32 values)
    assert record["nope_layers"] == ([1] if kind == "nope" else [])
    # our own implementation from the saved config.json agrees to float32 precision
    (params,) = RF.parameters_from_config(json.loads((folder / "config.json").read_text())).values()
    mine, scaling = params.frequencies()
    np.testing.assert_allclose(mine, want, rtol=2e-6, atol=0)
    assert record["by_type"]["all"]["attention_scaling"] == pytest.approx(scaling, rel=1e-6)
    if kind in ("partial", "glm"):
        assert record["partial_rotary_factor"] == 0.5 and got.size == 4  # 16 dims x 0.5 / 2

    ingest(str(out), warehouse=db, model_id=f"tiny-{kind}")
    con = store.connect(db, read_only=True)
    try:
        rows = con.execute(
            "SELECT layer, plane, dim_a, dim_b, inv_freq, band, source FROM rope_frequencies "
            "ORDER BY layer, plane"
        ).fetchall()
        finding = con.execute(
            "SELECT severity, detail FROM ingest_findings WHERE \"check\" = 'rope_frequencies'"
        ).fetchall()
    finally:
        con.close()
    assert finding[0][0] == "info" and "from capture" in finding[0][1]
    layers = sorted({r[0] for r in rows})
    assert layers and all(r[6] == "capture" for r in rows)
    if kind == "nope":
        assert 1 in layers
    for layer in layers:
        planes = [r for r in rows if r[0] == layer]
        if kind == "nope" and layer == 1:  # every dim its own unrotated plane
            assert [(r[1], r[2], r[3], r[5]) for r in planes] == [
                (i, i, None, "unrotated") for i in range(16)
            ]
            continue
        assert len(planes) == 16 - want.size  # d_rot/2 rotated planes + (d - d_rot) unrotated dims
        rotated = [r for r in planes if r[3] is not None]
        np.testing.assert_array_equal([r[4] for r in rotated], want)
        pairs = [(r[2], r[3]) for r in rotated]
        if layout == "half":
            assert pairs == [(i, i + want.size) for i in range(want.size)]
        else:
            assert pairs == [(2 * i, 2 * i + 1) for i in range(want.size)]
        # the stored planes are the ones the model turns: rotate a query by the model's own
        # RoPE at position p and each stored plane (a, b) holds the 2-D rotation p * inv_freq
        _assert_planes_turn_as_the_model_does(
            folder, rotated, record["by_type"]["all"]["attention_scaling"]
        )


def _assert_planes_turn_as_the_model_does(
    folder: Path, rotated: list[tuple], scaling: float
) -> None:
    import sys

    import torch
    from transformers import AutoModelForCausalLM

    lm = AutoModelForCausalLM.from_pretrained(folder)
    rot = next(m for n, m in lm.named_modules() if n.endswith("rotary_emb"))
    apply = sys.modules[type(rot).__module__].apply_rotary_pos_emb
    d, position = 16, 5
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 1, 1, d, generator=g, dtype=torch.float64)
    cos, sin = rot(q.float(), torch.full((1, 1), position))
    try:
        turned, _ = apply(q, q.clone(), cos.double(), sin.double())
    except RuntimeError:  # Phi splits the unrotated dims off before calling it
        width = int(cos.shape[-1])
        turned, _ = apply(q[..., :width], q[..., :width].clone(), cos.double(), sin.double())
        turned = torch.cat([turned, q[..., width:]], dim=-1)
    before, after = q.reshape(d).numpy(), turned.reshape(d).numpy()
    for _layer, _plane, a, b, f, *_ in rotated:
        angle = position * f
        c, s = np.cos(angle), np.sin(angle)
        want = (c * before[a] - s * before[b], s * before[a] + c * before[b])
        want = (scaling * want[0], scaling * want[1])  # yarn scales cos and sin
        # the model's cos/sin are float32 (rounding ~1e-7 of values of order 1); a wrong
        # pairing or frequency is off by order 1
        np.testing.assert_allclose((after[a], after[b]), want, rtol=0, atol=1e-5)


def test_per_layer_type_frequencies_of_a_gemma3_model(docs, tmp_path):
    """Full and sliding layers with their own rope parameters: one vector per layer type, each
    layer stored with its own type's vector."""
    import torch
    import transformers as T

    tokenizer, vocab = make_tokenizer()
    torch.manual_seed(5)
    cfg = T.Gemma3TextConfig(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=64,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=256,
        sliding_window=16,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"],
        rope_parameters={
            "full_attention": {"rope_type": "linear", "rope_theta": 1e6, "factor": 8.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
        },
    )
    model = T.Gemma3ForCausalLM(cfg)
    _randomise(model, seed=5)
    folder = tmp_path / "tiny-gemma3"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    out, db = tmp_path / "cap", tmp_path / "wh.duckdb"
    capture(
        CaptureSettings(
            model=str(folder),
            texts=(str(docs),),
            max_length=64,
            bucket_size=8,
            base_rate=4.0,
            heads=12,
            head_seed=0,
            include_sliding=True,
        ),
        out,
    )
    record = json.loads(read_metadata(out).metadata["rope_frequencies"])
    assert record["layer_types"] == ["sliding_attention", "full_attention", "sliding_attention"]
    buffers = {n.rsplit(".", 1)[-1]: b.double().numpy() for n, b in model.named_buffers()}
    for kind in ("full_attention", "sliding_attention"):
        np.testing.assert_array_equal(
            record["by_type"][kind]["inv_freq"], buffers[f"{kind}_inv_freq"]
        )
    # our own implementation from config.json agrees, type by type
    params = RF.parameters_from_config(json.loads((folder / "config.json").read_text()))
    for kind, p in params.items():
        np.testing.assert_allclose(
            p.frequencies()[0], buffers[f"{kind}_inv_freq"], rtol=2e-6, atol=0
        )
    ingest(str(out), warehouse=db, model_id="tiny-gemma3")
    con = store.connect(db, read_only=True)
    try:
        rows = con.execute(
            "SELECT layer, list(inv_freq ORDER BY plane) FROM rope_frequencies GROUP BY layer "
            "ORDER BY layer"
        ).fetchall()
    finally:
        con.close()
    assert [r[0] for r in rows] == [0, 1, 2]
    for layer, freqs in rows:
        kind = record["layer_types"][layer]
        np.testing.assert_array_equal(freqs, buffers[f"{kind}_inv_freq"])


def _rotary_module(model_type: str, **kw):
    """The rotary embedding module of ``model_type``'s modeling code, built from a tiny config."""
    import importlib

    from transformers import AutoConfig
    from transformers.models.auto.configuration_auto import model_type_to_module_name

    cfg = AutoConfig.for_model(
        model_type,
        hidden_size=64,
        num_attention_heads=4,
        head_dim=16,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, **kw},
        **kw,
    )
    name = model_type_to_module_name(model_type)
    module = importlib.import_module(f"transformers.models.{name}.modeling_{name}")
    (rotary_cls,) = [
        v
        for k, v in vars(module).items()
        if k.endswith("RotaryEmbedding") and getattr(v, "__module__", "") == module.__name__
    ]
    return rotary_cls(cfg)


@pytest.mark.parametrize(
    ("model_type", "kw", "want", "rotated"),
    [
        ("cohere", {}, "interleaved", 16),
        ("glm", {"partial_rotary_factor": 0.5}, "interleaved", 8),
        ("glm", {"partial_rotary_factor": 1.0}, "interleaved", 16),
        ("glm4", {"partial_rotary_factor": 0.5}, "interleaved", 8),
        ("llama", {}, "half", 16),
        ("phi", {"partial_rotary_factor": 0.5}, "half", 8),
    ],
)
def test_the_layout_is_measured_on_the_architectures_own_rope(model_type, kw, want, rotated):
    """Cohere's and GLM's ``rotate_half`` turn adjacent dims: the probe finds ``interleaved``
    for them (only the first ``rotated`` dims turn under partial rotary), ``half`` for Llama and
    Phi, and the table that serves datasets without a capture record agrees."""
    from qkwh.capture.model import _rope_layout, rope_pairs

    rotary = _rotary_module(model_type, **kw)
    partner = rope_pairs(rotary, 16)
    assert [p is not None for p in partner] == [True] * rotated + [False] * (16 - rotated)
    assert _rope_layout(rotary, 16) == want
    assert RF.layout_of_model_type(model_type) == want
    assert RF.layout_from_config({"model_type": model_type}) == want


@pytest.mark.parametrize(
    "model_type",
    sorted(RF.INTERLEAVED_MODEL_TYPES) + ["llama", "mistral", "qwen2", "qwen3", "gemma", "smollm3"],
)
def test_the_model_type_table_agrees_with_the_measured_layout(model_type):
    """Every model type of the table is measured interleaved, and common others half."""
    from qkwh.capture.model import _rope_layout

    assert _rope_layout(_rotary_module(model_type), 16) == RF.layout_of_model_type(model_type)
