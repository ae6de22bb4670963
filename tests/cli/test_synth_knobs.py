"""`qkwh synth` documents every knob of the planted geometry with its default (in --help and in
docs/synth.md, both generated from qkwh.synth.SYNTH_KNOBS) and names the valid knobs on a typo."""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

from qkwh.cli import app
from qkwh.synth import (
    SYNTH_KNOBS,
    knob_defaults,
    knobs_markdown,
    make_head,
    write_dataset,
)
from tests.conftest import synth_args

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()


def test_knob_defaults_are_the_generators():
    defaults = knob_defaults()
    assert set(defaults) == set(SYNTH_KNOBS)
    for k, v in defaults.items():
        assert v == (make_head.__kwdefaults__ | write_dataset.__kwdefaults__)[k]


def test_help_lists_every_knob_with_its_default():
    r = runner.invoke(app, ["synth", "--help"], terminal_width=250)
    assert r.exit_code == 0
    text = re.sub(r"\s+", " ", r.output)
    for k, v in knob_defaults().items():
        assert f"* {k} = {v:g}: " in text, k
    assert "…" not in r.output and "..." not in text


def test_docs_page_holds_the_generated_knob_table():
    page = (REPO / "docs" / "synth.md").read_text()
    assert knobs_markdown() in page, (
        "docs/synth.md is out of date: paste qkwh.synth.knobs_markdown()"
    )


def test_every_knob_is_accepted(tmp_path):
    for k, v in knob_defaults().items():
        r = runner.invoke(
            app,
            [
                *synth_args(str(tmp_path / k), layers=1, q_heads=1, head_dim=8, rows=50),
                "--set",
                f"{k}={v}",
            ],
        )
        assert r.exit_code == 0, (k, r.output + r.stderr)


def test_an_unknown_knob_lists_the_valid_ones_with_a_did_you_mean(tmp_path):
    r = runner.invoke(app, ["synth", str(tmp_path / "x"), "--set", "alpa_k=2e-3"])
    assert r.exit_code == 2
    assert "unknown knob 'alpa_k' (did you mean 'alpha_k'?)" in r.stderr
    assert all(k in r.stderr for k in SYNTH_KNOBS)
    assert not (tmp_path / "x").exists()
