"""The captured vectors are exactly what attention receives: equal to q/k recomputed here, from the
weights, with a few lines of numpy (projection + bias, per-head RMSNorm where the model has it,
RoPE), at every captured position of every file, for a Llama-style GQA model, a Qwen3-style model
with q/k norms, and a model with a sliding-window layer."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from capture_helpers import need_capture_extra

need_capture_extra()

import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from qkwh.capture.run import CaptureSettings, capture  # noqa: E402
from qkwh.capture.sampling import normalize_example_id, stored_example_id  # noqa: E402
from qkwh.sniffed.layout import scan  # noqa: E402
from qkwh.sniffed.reader import read_file  # noqa: E402

MAX_LEN = 160


def rms_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope(x: np.ndarray, pos: np.ndarray, theta: float) -> np.ndarray:
    """Rotate-half RoPE (the Hugging Face layout: pairs (i, i + d/2)) at integer positions."""
    d = x.shape[-1]
    inv = theta ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    ang = pos[:, None].astype(np.float64) * inv[None, :]
    cos, sin = np.cos(np.concatenate([ang, ang], -1)), np.sin(np.concatenate([ang, ang], -1))
    rotated = np.concatenate([-x[:, d // 2 :], x[:, : d // 2]], -1)
    return x * cos + rotated * sin


def attention_inputs(model_dir: Path, text: str) -> tuple[object, list[np.ndarray]]:
    """(config, per-layer hidden states entering self-attention) from an ordinary eager forward."""
    tok = AutoTokenizer.from_pretrained(model_dir)
    lm = AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    ids = tok(text, truncation=True, max_length=MAX_LEN, return_tensors="pt")["input_ids"]
    seen: dict[int, np.ndarray] = {}
    hooks = [
        layer.self_attn.register_forward_pre_hook(
            lambda mod, args, kwargs, i=i: seen.__setitem__(
                i, kwargs["hidden_states"][0].double().numpy()
            ),
            with_kwargs=True,
        )
        for i, layer in enumerate(lm.model.layers)
    ]
    with torch.no_grad():
        lm(input_ids=ids)
    for h in hooks:
        h.remove()
    return lm, [seen[i] for i in range(len(seen))]


def expected(
    lm, hidden: np.ndarray, layer: int, head: int, kind: str, pos: np.ndarray
) -> np.ndarray:
    """q or k of one head at ``pos``, recomputed from the weights in float64."""
    attn = lm.model.layers[layer].self_attn
    proj = attn.q_proj if kind == "q" else attn.k_proj
    w = proj.weight.detach().double().numpy()
    d = lm.config.head_dim
    x = hidden[pos] @ w[head * d : (head + 1) * d].T
    if proj.bias is not None:
        x = x + proj.bias.detach().double().numpy()[head * d : (head + 1) * d]
    norm = getattr(attn, "q_norm" if kind == "q" else "k_norm", None)
    if norm is not None:
        x = rms_norm(x, norm.weight.detach().double().numpy(), lm.config.rms_norm_eps)
    return rope(x, pos, float(lm.config.rope_parameters["rope_theta"]))


def check_against_recompute(model_dir: Path, docs: Path, out: Path) -> dict[str, int]:
    texts = {
        stored_example_id(normalize_example_id(row["id"])): row["text"]
        for row in map(json.loads, docs.read_text().splitlines())
    }
    cache = {eid: attention_inputs(model_dir, text) for eid, text in texts.items()}
    checked = {"files": 0, "rows": 0}
    for f in scan(out).files:
        data = read_file(f.path)
        for eid in np.unique(data.example_id):
            lm, hidden = cache[int(eid)]
            sel = data.example_id == eid
            pos = data.position[sel]
            want = expected(lm, hidden[f.layer], f.layer, f.head, f.kind, pos)
            np.testing.assert_allclose(
                data.vectors[sel],
                want,
                rtol=1e-4,
                atol=2e-5,
                err_msg=f"{f.config_name} example {eid}",
            )
            checked["rows"] += int(sel.sum())
        checked["files"] += 1
    return checked


@pytest.mark.parametrize("kind", ["llama", pytest.param("qwen3", marks=pytest.mark.slow)])
def test_vectors_equal_projection_norm_rope_recomputed_from_weights(
    kind, tiny_models, docs, tmp_path
):
    out = tmp_path / "cap"
    rep = capture(
        CaptureSettings(
            model=str(tiny_models[kind]),
            texts=(str(docs),),
            max_length=MAX_LEN,
            bucket_size=16,
            base_rate=6,
            heads=100,
        ),
        out,
    )
    lm = AutoModelForCausalLM.from_pretrained(tiny_models[kind])
    n_q, n_kv = lm.config.num_attention_heads, lm.config.num_key_value_heads
    # every head of every layer (100 >= candidates), each key head once: GQA before repetition
    assert rep.n_files == 3 * (n_q + n_kv)
    checked = check_against_recompute(tiny_models[kind], docs, out)
    assert checked["files"] == rep.n_files and checked["rows"] == rep.n_rows > 1000


def test_pre_rope_projection_is_not_what_is_stored(tiny_models, docs, tmp_path):
    """The check above can fail: the raw projection (no RoPE) misses the stored vectors."""
    out = tmp_path / "cap"
    capture(
        CaptureSettings(
            model=str(tiny_models["llama"]),
            texts=(str(docs),),
            max_length=MAX_LEN,
            bucket_size=16,
            base_rate=6,
            heads=1,
        ),
        out,
    )
    f = next(f for f in scan(out).files if f.kind == "k")
    data = read_file(f.path)
    row = data.example_id == data.example_id[0]
    text = json.loads(docs.read_text().splitlines()[0])["text"]
    lm, hidden = attention_inputs(tiny_models["llama"], text)
    pos = data.position[row]
    attn = lm.model.layers[f.layer].self_attn
    d = lm.config.head_dim
    raw = (
        hidden[f.layer][pos]
        @ attn.k_proj.weight.detach().double().numpy()[f.head * d : (f.head + 1) * d].T
    )
    raw += attn.k_proj.bias.detach().double().numpy()[f.head * d : (f.head + 1) * d]
    moved = pos > 0
    assert moved.any()
    assert np.abs(data.vectors[row][moved] - raw[moved]).max(axis=1).min() > 1e-3
    np.testing.assert_allclose(data.vectors[row], rope(raw, pos, 500.0), rtol=1e-4, atol=2e-5)


@pytest.mark.slow  # captures a sliding-window model
def test_sliding_window_layers_skipped_by_default(tiny_models, docs, tmp_path):
    out = tmp_path / "cap"
    capture(
        CaptureSettings(
            model=str(tiny_models["sliding"]),
            texts=(str(docs),),
            max_length=MAX_LEN,
            bucket_size=16,
            base_rate=6,
            heads=100,
        ),
        out,
    )
    layers = {f.layer for f in scan(out).files}
    assert layers == {0, 2}
    meta = json.loads((out / "_saver_state.json").read_text())["model_metadata"]
    assert meta["head_sampling_sliding_candidates_excluded"] == 6
    assert meta["head_sampling_full_attention_only"] == 1 and meta["attention_scope"] == "full_only"
    assert "skipped layers: 1." in (out / "README.md").read_text()


@pytest.mark.slow  # captures a sliding-window model
def test_sliding_window_layer_recorded_with_its_window(tiny_models, docs, tmp_path):
    out = tmp_path / "cap"
    capture(
        CaptureSettings(
            model=str(tiny_models["sliding"]),
            texts=(str(docs),),
            max_length=MAX_LEN,
            bucket_size=16,
            base_rate=6,
            heads=100,
            include_sliding=True,
        ),
        out,
    )
    files = scan(out).files
    assert {f.layer for f in files} == {0, 1, 2}
    for f in files:
        data = read_file(f.path)
        assert data.sliding_window_values == ((16,) if f.layer == 1 else (None,)), f.config_name
    check_against_recompute(tiny_models["sliding"], docs, out)
    meta = json.loads((out / "_saver_state.json").read_text())["model_metadata"]
    assert (
        meta["head_sampling_sliding_candidates_excluded"] == 0
        and meta["model_sliding_window"] == 16
    )


@pytest.mark.parametrize("kind", ["llama", "sliding"])
def test_hooked_forward_computes_the_same_logits(kind, tiny_models):
    """The hook only looks: with it, attention (masks and sliding windows included) is unchanged."""
    from qkwh.capture.model import HOOK_NAME, attention_hook

    lm = AutoModelForCausalLM.from_pretrained(tiny_models[kind], dtype=torch.float32).eval()
    ids = torch.arange(3, 3 + 90).remainder(lm.config.vocab_size)[None]
    calls = []
    with torch.no_grad():
        ref = lm(input_ids=ids).logits
        with attention_hook(
            lm,
            lambda layer, q, k, window: calls.append(
                (layer, tuple(q.shape), tuple(k.shape), window)
            ),
        ):
            assert lm.config._attn_implementation == HOOK_NAME
            hooked = lm(input_ids=ids, use_cache=False).logits
    assert lm.config._attn_implementation != HOOK_NAME
    torch.testing.assert_close(hooked, ref, rtol=0, atol=0)
    n_q, n_kv = lm.config.num_attention_heads, lm.config.num_key_value_heads
    want_window = {1: 16} if kind == "sliding" else {}
    assert calls == [(i, (1, n_q, 90, 16), (1, n_kv, 90, 16), want_window.get(i)) for i in range(3)]
