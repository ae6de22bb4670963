"""Where ingest takes a model's RoPE frequencies from (qkwh.rope_sources, docs/metrics/rope.md):
the model folder's config.json, the Hugging Face cache, the Hub (local stand-in), the saver
state's rope_theta, and a warning naming the missing field otherwise (the ingest succeeds)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hub_server import HubStandIn

from qkwh import rope_config as RF
from qkwh import store
from qkwh.ingest import ingest
from qkwh.rope_sources import resolve
from qkwh.sniffed.metadata import DatasetMetadata

LLAMA3 = {
    "head_dim": 64,
    "num_attention_heads": 9,
    "hidden_size": 576,
    "max_position_embeddings": 8192,
    "rope_theta": 500000.0,
    "rope_scaling": {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 2048,
    },
}
MODEL_REPO = "someone/tiny-llama3"


def _edit_state(root: Path, **changes) -> None:
    path = root / "_saver_state.json"
    state = json.loads(path.read_text())
    for k, v in changes.items():
        if v is None:
            state["model_metadata"].pop(k, None)
        else:
            state["model_metadata"][k] = v
    path.write_text(json.dumps(state))
    (root / "README.md").unlink(missing_ok=True)  # the card would fill the removed keys back in


def _rope(db: Path) -> tuple[list[tuple], list[tuple]]:
    con = store.connect(db, read_only=True)
    try:
        rows = con.execute(
            "SELECT layer, plane, inv_freq, band, source FROM rope_frequencies ORDER BY layer, plane"
        ).fetchall()
        found = con.execute(
            "SELECT severity, detail FROM ingest_findings WHERE \"check\" = 'rope_frequencies'"
        ).fetchall()
    finally:
        con.close()
    return rows, found


def test_saver_state_rope_theta_gives_the_default_frequencies(sample_copy, tmp_path):
    db = tmp_path / "wh.duckdb"
    ingest(str(sample_copy), warehouse=db)
    rows, found = _rope(db)
    assert found == [
        (
            "info",
            (
                "RoPE frequencies from rope_theta (rope_theta 100000, default type): 9 layer(s), "
                "rotated width 64, layout half"
            ),
        )
    ]
    layer0 = [r for r in rows if r[0] == rows[0][0]]
    np.testing.assert_array_equal([r[2] for r in layer0], RF.default_inv_freq(1e5, 64))
    assert [r[3] for r in layer0] == ["high"] * 13 + ["mid"] * 7 + ["low"] * 12


def test_the_model_folders_config_wins_over_rope_theta(sample_copy, tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(LLAMA3))
    _edit_state(sample_copy, model_source=str(folder), rope_type="llama3")
    db = tmp_path / "wh.duckdb"
    ingest(str(sample_copy), warehouse=db)
    rows, found = _rope(db)
    assert found[0][0] == "info" and f"from config ({folder / 'config.json'})" in found[0][1]
    want = RF.inv_freq("llama3", 500000.0, 64, LLAMA3["rope_scaling"])[0]
    np.testing.assert_array_equal([r[2] for r in rows if r[0] == rows[0][0]], want)
    assert {r[4] for r in rows} == {"config"}


def test_a_missing_field_is_a_warning_and_the_ingest_succeeds(sample_copy, tmp_path):
    _edit_state(sample_copy, rope_type="yarn")
    db = tmp_path / "wh.duckdb"
    report = ingest(str(sample_copy), warehouse=db)
    assert report.status == "ingested"
    rows, found = _rope(db)
    assert rows == []
    assert (
        found[0][0] == "warning" and "rope_type 'yarn' needs its scaling parameters" in found[0][1]
    )
    # a model config that lacks a field names it
    folder = tmp_path / "model"
    folder.mkdir()
    bad = {
        **LLAMA3,
        "rope_scaling": {k: v for k, v in LLAMA3["rope_scaling"].items() if k != "low_freq_factor"},
    }
    (folder / "config.json").write_text(json.dumps(bad))
    _edit_state(sample_copy, model_source=str(folder), rope_theta=None)
    ingest(str(sample_copy), warehouse=db, model_id="other")
    con = store.connect(db, read_only=True)
    detail = con.execute(
        "SELECT detail FROM ingest_findings WHERE model_id = 'other' AND \"check\" = 'rope_frequencies'"
    ).fetchone()[0]
    con.close()
    assert "'low_freq_factor', which is missing" in detail


def test_re_ingest_picks_up_a_frequency_source_that_appeared(sample_copy, tmp_path):
    _edit_state(sample_copy, rope_type="llama3")
    db = tmp_path / "wh.duckdb"
    assert ingest(str(sample_copy), warehouse=db).status == "ingested"
    assert _rope(db)[0] == []
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(LLAMA3))
    _edit_state(sample_copy, model_source=str(folder))
    assert ingest(str(sample_copy), warehouse=db).status == "replaced"
    assert len(_rope(db)[0]) == 9 * 32
    assert ingest(str(sample_copy), warehouse=db).status == "unchanged"


def _meta(**kw) -> DatasetMetadata:
    return DatasetMetadata("x", dict(kw))


def test_hub_config_is_downloaded_once_then_read_from_the_cache(hf_env, monkeypatch):
    with HubStandIn(
        MODEL_REPO, {"main": {"config.json": json.dumps(LLAMA3).encode()}}, repo_type="model"
    ) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        kw = {
            "meta": _meta(rope_type="llama3"),
            "layers": [0, 1],
            "head_dim": 64,
            "rope_theta": 500000.0,
            "rope_type": "llama3",
            "nope_layers": "1",
            "hf_model": MODEL_REPO,
        }
        # a local dataset never makes ingest wait on the network
        assert resolve(**kw)[0] is None and hub.requests == []
        resolved, found = resolve(**kw, allow_download=True)
        assert hub.file_gets("config.json")
    assert found[0].severity == "info" and "NoPE layers 1" in found[0].detail
    np.testing.assert_array_equal(
        resolved.by_layer[0][0], RF.inv_freq("llama3", 5e5, 64, LLAMA3["rope_scaling"])[0]
    )
    assert resolved.by_layer[1][0] is None
    # the server is gone: the cached config still answers, without any download
    again, found = resolve(**kw)
    assert again.source == "config" and np.array_equal(
        again.by_layer[0][0], resolved.by_layer[0][0]
    )


def test_an_unreachable_hub_is_a_warning(hf_env, monkeypatch):
    with HubStandIn(MODEL_REPO, {"main": {}}, repo_type="model") as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        resolved, found = resolve(
            meta=_meta(),
            layers=[0],
            head_dim=64,
            rope_theta=None,
            rope_type="llama3",
            nope_layers=None,
            hf_model=MODEL_REPO,
            allow_download=True,
        )
    assert resolved is None and found[0].severity == "warning"
    assert (
        "no rope_theta" in found[0].detail
        and f"config.json of {MODEL_REPO} could not be read" in found[0].detail
    )


def test_capture_record_per_layer_type_and_bad_records():
    record = {
        "by_type": {
            "full_attention": {"inv_freq": [1.0, 0.1], "attention_scaling": 1.0},
            "sliding_attention": {"inv_freq": [1.0, 0.01], "attention_scaling": 1.0},
        },
        "layer_types": ["sliding_attention", "full_attention"],
        "nope_layers": [],
        "layout": "interleaved",
        "partial_rotary_factor": 1.0,
    }
    resolved, found = resolve(
        meta=_meta(rope_frequencies=json.dumps(record)),
        layers=[0, 1],
        head_dim=4,
        rope_theta=None,
        rope_type=None,
        nope_layers=None,
        hf_model=None,
    )
    assert resolved.source == "capture" and resolved.layout == "interleaved"
    assert resolved.by_layer[0][0].tolist() == [1.0, 0.01] and resolved.by_layer[1][0].tolist() == [
        1.0,
        0.1,
    ]
    rows = resolved.rows("m", head_dim=4, bucket_size=8, context_length=64)
    assert rows["dim_b"][:2] == [1, 3]  # interleaved: planes (0, 1), (2, 3)
    broken = {**record, "layer_types": ["full_attention"]}
    resolved, found = resolve(
        meta=_meta(rope_frequencies=json.dumps(broken)),
        layers=[0, 1],
        head_dim=4,
        rope_theta=None,
        rope_type=None,
        nope_layers=None,
        hf_model=None,
    )
    assert resolved is None and "no layer_types entry for layer 1" in found[0].detail


def test_scaling_recorded_in_the_metadata_is_used_with_rope_theta():
    scaling = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048}
    for recorded in (scaling, json.dumps(scaling)):
        resolved, found = resolve(
            meta=_meta(rope_scaling=recorded),
            layers=[3],
            head_dim=64,
            rope_theta=1e6,
            rope_type="yarn",
            nope_layers=None,
            hf_model=None,
        )
        assert resolved.source == "rope_theta" and found[0].severity == "info"
        want, scale = RF.inv_freq("yarn", 1e6, 64, scaling)
        np.testing.assert_array_equal(resolved.by_layer[3][0], want)
        assert resolved.by_layer[3][1] == scale > 1
    resolved, found = resolve(
        meta=_meta(rope_scaling={"rope_type": "yarn", "factor": 4.0}),
        layers=[3],
        head_dim=64,
        rope_theta=1e6,
        rope_type="yarn",
        nope_layers=None,
        hf_model=None,
    )
    assert (
        resolved is None
        and "'original_max_position_embeddings', which is missing" in found[0].detail
    )


def _findings(db: Path, model_id: str) -> list[tuple[str, str]]:
    con = store.connect(db, read_only=True)
    try:
        return con.execute(
            "SELECT severity, detail FROM ingest_findings WHERE model_id = ? "
            "AND \"check\" = 'rope_frequencies' ORDER BY severity, detail",
            [model_id],
        ).fetchall()
    finally:
        con.close()


@pytest.mark.parametrize(
    ("state", "config", "says"),
    [
        ({"rope_theta": "inf"}, None, "_saver_state.json rope_theta inf is not a finite positive"),
        ({"rope_theta": "abc"}, None, "_saver_state.json rope_theta 'abc' is not a number"),
        (None, {"rope_scaling": {"rope_type": "linear", "factor": 0}}, "'factor' must be positive"),
        (None, {"rope_theta": "abc"}, "rope_theta is not a number ('abc')"),
        (None, {"rope_theta": [1e4]}, "rope_theta is not a number ([10000.0])"),
        (None, {"rope_theta": float("inf")}, "rope_theta is not a finite number"),
        (None, {"rope_scaling": [1, 2]}, "rope_scaling is not an object"),
        (None, {"head_dim": [64]}, "head_dim is not a number"),
        (
            None,
            {
                "rope_scaling": {
                    "rope_type": "yarn",
                    "factor": "4",
                    "original_max_position_embeddings": 2048,
                }
            },
            "'factor' is not a number",
        ),
        (
            {
                "rope_frequencies": json.dumps(
                    {
                        "by_type": {"all": {"inv_freq": [1.0]}},
                        "layout": "half",
                        "nope_layers": ["x"],
                    }
                )
            },
            None,
            "_saver_state.json rope_frequencies is not a capture record",
        ),
        ({"rope_frequencies": "[1, 2]"}, None, "rope_frequencies is not a capture record"),
        (
            {
                "rope_frequencies": json.dumps(
                    {"by_type": {"all": {"inv_freq": [[1.0]]}}, "layout": "half"}
                )
            },
            None,
            "rope_frequencies is not a capture record",
        ),
        (
            {
                "rope_frequencies": json.dumps(
                    {
                        "by_type": {"all": {"inv_freq": [1.0]}},
                        "layout": "half",
                        "layer_types": "full",
                    }
                )
            },
            None,
            "layer_types is not a list of names",
        ),
    ],
)
def test_malformed_rope_facts_are_a_warning_not_a_crash(sample_copy, tmp_path, state, config, says):
    """Malformed RoPE facts in the metadata, a config.json or a capture record: the ingest
    succeeds and a warning finding names the source and the problem (no traceback)."""
    if state:
        _edit_state(sample_copy, **state)
    if config is not None:
        folder = tmp_path / "model"
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps({**LLAMA3, **config}))
        _edit_state(sample_copy, model_source=str(folder))
    db = tmp_path / "wh.duckdb"
    report = ingest(str(sample_copy), warehouse=db, model_id="odd")
    assert report.status == "ingested"
    found = _findings(db, "odd")
    warnings = [d for s, d in found if s == "warning"]
    assert any(says in d for d in warnings), found


def test_an_unusable_source_is_named_when_a_later_one_wins(sample_copy, tmp_path):
    """A config.json whose head_dim does not fit the files (it would have given a yarn scaling)
    is skipped for the metadata's rope_theta, and a warning says so; so is a bad capture
    record."""
    folder = tmp_path / "model"
    folder.mkdir()
    yarn = {
        "head_dim": 32,
        "rope_theta": 1e5,
        "rope_scaling": {
            "rope_type": "yarn",
            "factor": 4.0,
            "original_max_position_embeddings": 2048,
        },
    }
    (folder / "config.json").write_text(json.dumps(yarn))
    _edit_state(sample_copy, model_source=str(folder), rope_frequencies='{"layout": "half"}')
    db = tmp_path / "wh.duckdb"
    ingest(str(sample_copy), warehouse=db, model_id="odd")
    found = _findings(db, "odd")
    assert [s for s, _ in found] == ["info", "warning", "warning"], found
    assert "from rope_theta" in found[0][1]
    skipped = " | ".join(d for _, d in found[1:])
    assert (
        f"{folder / 'config.json'}: head_dim 32 differs from the files' vector length 64" in skipped
    )
    assert "_saver_state.json rope_frequencies is not a capture record" in skipped
    assert skipped.count("the frequencies come from rope_theta instead") == 2


@pytest.mark.parametrize("value", [0, "x", 1.5, -0.5, "nan"])
def test_a_bad_partial_rotary_factor_is_refused_naming_the_file(sample_copy, tmp_path, value):
    """partial_rotary_factor 0 or "x" in the metadata is never read as 1."""
    _edit_state(sample_copy, partial_rotary_factor=value)
    db = tmp_path / "wh.duckdb"
    assert ingest(str(sample_copy), warehouse=db, model_id="odd").status == "ingested"
    rows, _ = _rope(db)
    assert rows == []
    ((severity, detail),) = _findings(db, "odd")
    assert severity == "warning"
    assert f"_saver_state.json partial_rotary_factor {value!r} is not a number in (0, 1]" in detail
    # a valid factor is used
    _edit_state(sample_copy, partial_rotary_factor=0.5)
    ingest(str(sample_copy), warehouse=db, model_id="odd")
    assert "rotated width 32" in _findings(db, "odd")[0][1]


def test_without_a_capture_record_the_layout_follows_the_model_type(tmp_path):
    """A GLM config.json (no capture record): interleaved planes (0, 1), (2, 3), ...; a Llama
    one: half."""
    for model_type, layout, second in (("glm", "interleaved", 1), ("llama", "half", 16)):
        folder = tmp_path / model_type
        folder.mkdir()
        (folder / "config.json").write_text(
            json.dumps({"model_type": model_type, "head_dim": 32, "rope_theta": 1e4})
        )
        resolved, found = resolve(
            meta=_meta(model_source=str(folder)),
            layers=[0],
            head_dim=32,
            rope_theta=None,
            rope_type=None,
            nope_layers=None,
            hf_model=None,
        )
        assert resolved.source == "config" and resolved.layout == layout, found
        rows = resolved.rows("m", head_dim=32, bucket_size=8, context_length=64)
        assert (rows["dim_a"][0], rows["dim_b"][0]) == (0, second)
        # the metadata's model type serves the rope_theta source too
        resolved, _ = resolve(
            meta=_meta(model_type=model_type),
            layers=[0],
            head_dim=32,
            rope_theta=1e4,
            rope_type=None,
            nope_layers=None,
            hf_model=None,
        )
        assert resolved.source == "rope_theta" and resolved.layout == layout
