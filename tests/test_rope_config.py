"""RoPE planes and frequencies (qkwh.rope_config): each rope type against
transformers' own rope initialisation when it is installed, and against vectors stored from it
(tests/data/rope_inv_freq.json) always; layouts, partial rotary, NoPE and bands."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from qkwh import rope_config as RF

STORED = Path(__file__).resolve().parent / "data" / "rope_inv_freq.json"

#: config.json-like dicts (transformers 5 spelling) of each rope type
CASES: dict[str, dict] = {
    "default_smollm2": {
        "head_dim": 64,
        "rope_parameters": {"rope_type": "default", "rope_theta": 100000.0},
    },
    "linear": {
        "head_dim": 64,
        "rope_parameters": {"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0},
    },
    "llama3": {
        "head_dim": 128,
        "rope_parameters": {
            "rope_type": "llama3",
            "rope_theta": 500000.0,
            "factor": 32.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
    },
    "yarn": {
        "head_dim": 128,
        "rope_parameters": {
            "rope_type": "yarn",
            "rope_theta": 1000000.0,
            "factor": 4.0,
            "original_max_position_embeddings": 32768,
        },
    },
    "yarn_mscale_untruncated": {
        "head_dim": 64,
        "rope_parameters": {
            "rope_type": "yarn",
            "rope_theta": 10000.0,
            "factor": 16.0,
            "original_max_position_embeddings": 4096,
            "beta_fast": 16,
            "beta_slow": 2,
            "mscale": 0.707,
            "mscale_all_dim": 1.0,
            "truncate": False,
        },
    },
    "yarn_attention_factor": {
        "head_dim": 64,
        "rope_parameters": {
            "rope_type": "yarn",
            "rope_theta": 10000.0,
            "factor": 8.0,
            "original_max_position_embeddings": 2048,
            "attention_factor": 1.25,
        },
    },
    "default_partial": {
        "head_dim": 80,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 10000.0,
            "partial_rotary_factor": 0.4,
        },
    },
    "yarn_partial": {
        "head_dim": 96,
        "rope_parameters": {
            "rope_type": "yarn",
            "rope_theta": 50000.0,
            "factor": 2.0,
            "original_max_position_embeddings": 1024,
            "partial_rotary_factor": 0.5,
        },
    },
}


def transformers_inv_freq(case: dict) -> tuple[np.ndarray, float]:
    """transformers' own (inv_freq, attention scaling) of a case (float32, as the model holds it)."""
    from transformers import LlamaConfig, PhiConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    from transformers.models.phi.modeling_phi import PhiRotaryEmbedding

    params = dict(case["rope_parameters"])
    d = case["head_dim"]
    if (
        params["rope_type"] == "default"
    ):  # each model class has its own default; Phi's honours partial rotary
        cfg = PhiConfig(
            hidden_size=d * 2,
            num_attention_heads=2,
            rope_parameters=params,
            partial_rotary_factor=params.get("partial_rotary_factor", 1.0),
        )
        f, s = PhiRotaryEmbedding.compute_default_rope_parameters(cfg)
    else:
        cfg = LlamaConfig(
            hidden_size=d * 2,
            num_attention_heads=2,
            head_dim=d,
            max_position_embeddings=131072,
            rope_parameters=params,
        )
        f, s = ROPE_INIT_FUNCTIONS[params["rope_type"]](cfg)
    return f.double().numpy(), float(s)


def ours(case: dict) -> tuple[np.ndarray, float]:
    (params,) = RF.parameters_from_config(case).values()
    return params.frequencies()


def _stored() -> dict:
    return json.loads(STORED.read_text())["cases"]


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_the_stored_transformers_vectors(name):
    f, s = ours(CASES[name])
    want = _stored()[name]
    # transformers computes in float32: agreement to float32 precision
    np.testing.assert_allclose(f, want["inv_freq"], rtol=2e-6, atol=0)
    assert s == pytest.approx(want["attention_scaling"], rel=1e-6)
    assert f.dtype == np.float64 and f.shape == (len(want["inv_freq"]),)


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_transformers_rope_initialisation(name):
    pytest.importorskip("torch", reason="capture extra not installed")
    pytest.importorskip("transformers", reason="capture extra not installed")
    f, s = ours(CASES[name])
    want, scaling = transformers_inv_freq(CASES[name])
    np.testing.assert_allclose(f, want, rtol=2e-6, atol=0)
    assert s == pytest.approx(scaling, rel=1e-6)


def test_stored_vectors_cover_every_case():
    assert set(_stored()) == set(CASES)


def test_default_is_theta_to_the_minus_2i_over_d_rot():
    f, s = RF.inv_freq("default", 10000.0, 8)
    np.testing.assert_array_equal(f, [1.0, 10000.0**-0.25, 10000.0**-0.5, 10000.0**-0.75])
    assert s == 1.0
    np.testing.assert_array_equal(RF.inv_freq("linear", 10000.0, 8, {"factor": 4})[0], f / 4)


def test_llama3_keeps_high_divides_low_and_interpolates_between():
    base = RF.default_inv_freq(500000.0, 128)
    f, _ = RF.inv_freq("llama3", 500000.0, 128, CASES["llama3"]["rope_parameters"])
    wl = 2 * math.pi / base
    high, low = wl < 8192 / 4, wl > 8192 / 1
    np.testing.assert_array_equal(f[high], base[high])
    np.testing.assert_allclose(f[low], base[low] / 32, rtol=1e-15)
    mid = ~high & ~low
    assert mid.any() and np.all((f[mid] < base[mid]) & (f[mid] > base[mid] / 32))


def test_yarn_ramps_from_extrapolation_to_interpolation():
    p = CASES["yarn"]["rope_parameters"]
    base = RF.default_inv_freq(p["rope_theta"], 128)
    f, s = RF.inv_freq("yarn", p["rope_theta"], 128, p)
    assert f[0] == base[0] and f[-1] == pytest.approx(base[-1] / 4, rel=1e-15)
    ratio = f / base
    assert np.all(np.diff(ratio) <= 1e-15)  # monotone from 1 down to 1/factor
    assert s == pytest.approx(0.1 * math.log(4) + 1)


def test_transformers_4_spelling_and_hidden_size_fallback():
    cfg = {
        "hidden_size": 576,
        "num_attention_heads": 9,
        "rope_theta": 100000.0,
        "rope_scaling": None,
    }
    (p,) = RF.parameters_from_config(cfg).values()
    assert (p.rope_type, p.theta, p.head_dim, p.rotary_dim) == ("default", 100000.0, 64, 64)
    cfg4 = {
        "head_dim": 128,
        "rope_theta": 500000.0,
        "rope_scaling": {
            "type": "llama3",
            "factor": 32.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
    }
    np.testing.assert_array_equal(
        RF.parameters_from_config(cfg4)["all"].frequencies()[0], ours(CASES["llama3"])[0]
    )
    neox = {"hidden_size": 128, "num_attention_heads": 2, "rotary_pct": 0.25, "rope_theta": 10000}
    assert RF.parameters_from_config(neox)["all"].rotary_dim == 16


def test_per_layer_type_parameters_and_multimodal_text_config():
    cfg = {
        "text_config": {
            "head_dim": 32,
            "num_attention_heads": 4,
            "layer_types": ["sliding_attention", "full_attention"],
            "rope_parameters": {
                "full_attention": {"rope_type": "linear", "rope_theta": 1e6, "factor": 8.0},
                "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
            },
        }
    }
    params = RF.parameters_from_config(cfg)
    assert sorted(params) == ["full_attention", "sliding_attention"]
    assert params["full_attention"].frequencies()[0][0] == 1 / 8
    assert RF.layer_types_from_config(cfg) == ["sliding_attention", "full_attention"]
    assert RF.nope_layers_from_config({"no_rope_layers": [1, 1, 0, 1, 0]}) == [2, 4]


@pytest.mark.parametrize(
    ("cfg", "field"),
    [
        (
            {
                "head_dim": 64,
                "rope_parameters": {
                    "rope_type": "llama3",
                    "rope_theta": 5e5,
                    "factor": 8.0,
                    "high_freq_factor": 4.0,
                    "original_max_position_embeddings": 8192,
                },
            },
            "low_freq_factor",
        ),
        (
            {
                "head_dim": 64,
                "rope_parameters": {"rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0},
            },
            "original_max_position_embeddings",
        ),
        ({"head_dim": 64, "rope_scaling": {"type": "linear", "factor": 2.0}}, "rope_theta"),
        ({"head_dim": 64, "rope_parameters": {"rope_type": "linear", "rope_theta": 1e4}}, "factor"),
        ({"rope_theta": 1e4}, "head_dim"),
        (
            {"head_dim": 64, "rope_parameters": {"rope_type": "longrope", "rope_theta": 1e4}},
            "longrope",
        ),
    ],
)
def test_a_missing_field_is_named(cfg, field):
    with pytest.raises(RF.RopeParameterError, match=field):
        RF.parameters_from_config(cfg)


def test_smollm2_bands():
    """θ = 1e5, d = 64, m = 512, L = 8192: planes 0-12 high, 13-19 mid, 20-31 low."""
    ps = RF.planes(64, RF.default_inv_freq(1e5, 64), bucket_size=512, context_length=8192)
    assert [p.band for p in ps] == ["high"] * 13 + ["mid"] * 7 + ["low"] * 12
    assert all(p.wavelength == pytest.approx(2 * math.pi / p.inv_freq, rel=1e-15) for p in ps)


def test_half_and_interleaved_layouts():
    f = RF.default_inv_freq(1e4, 8)
    half = RF.planes(8, f, bucket_size=4, context_length=64)
    inter = RF.planes(8, f, bucket_size=4, context_length=64, layout="interleaved")
    assert [(p.dim_a, p.dim_b) for p in half] == [(0, 4), (1, 5), (2, 6), (3, 7)]
    assert [(p.dim_a, p.dim_b) for p in inter] == [(0, 1), (2, 3), (4, 5), (6, 7)]
    with pytest.raises(RF.RopeParameterError, match="layout"):
        RF.planes(8, f, bucket_size=4, context_length=64, layout="spiral")


def test_partial_rotary_leaves_the_last_dims_unrotated():
    (p,) = RF.parameters_from_config(CASES["default_partial"]).values()
    assert p.rotary_dim == 32
    ps = RF.planes(80, p.frequencies()[0], bucket_size=64, context_length=4096)
    assert len(ps) == 16 + 48
    assert [(q.dim_a, q.dim_b) for q in ps[:2]] == [(0, 16), (1, 17)]
    rest = ps[16:]
    assert [q.dim_a for q in rest] == list(range(32, 80)) and all(q.dim_b is None for q in rest)
    assert all(q.band == "unrotated" and q.inv_freq == 0 and math.isinf(q.wavelength) for q in rest)
    assert [q.plane for q in ps] == list(range(64))
    # every dim is in exactly one plane
    dims = [d for q in ps for d in (q.dim_a, q.dim_b) if d is not None]
    assert sorted(dims) == list(range(80))


def test_nope_layer_has_every_dim_unrotated():
    ps = RF.planes(16, None, bucket_size=4, context_length=64)
    assert [(q.plane, q.dim_a, q.dim_b, q.band) for q in ps] == [
        (i, i, None, "unrotated") for i in range(16)
    ]


def test_band_edges():
    assert RF.band_of(511.999, 512, 8192) == "high"
    assert RF.band_of(512.0, 512, 8192) == "mid"
    assert RF.band_of(8191.9, 512, 8192) == "mid"
    assert RF.band_of(8192.0, 512, 8192) == "low"
    assert RF.band_of(math.inf, 512, 8192) == "unrotated"


def test_rotary_dim_rounds_like_transformers_and_refuses_odd_widths():
    assert RF.rotary_dim(80, 0.4) == 32 and RF.rotary_dim(64, 1.0) == 64
    with pytest.raises(RF.RopeParameterError, match="odd"):
        RF.rotary_dim(10, 0.5)
    with pytest.raises(RF.RopeParameterError, match="partial_rotary_factor"):
        RF.rotary_dim(64, 0.0)
