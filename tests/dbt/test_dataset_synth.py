"""End to end: captures of one synthetic model on different "texts", through synth, ingest
--dataset, compute --documents and build, compared in dataset_comparisons.

Every capture plants the same geometry in distribution (same knobs, documents that differ by
`doc_spread`), each with its own seed, so their documents and noise differ.  Three captures share
one document mix; a fourth is a text whose documents carry a stronger bias along the drift axis
(mu_q_a 8 instead of 4, so bias_strength is twice as large).  The fourth must be told apart
from each of the three; among the three same-mix pairs at most one may come out distinguishable
(the rate a 95 % interval allows over three pairs, with room)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from qkwh.build import build
from qkwh.cli import app
from tests.dbt.conftest import Built, _quiet

pytestmark = pytest.mark.slow

SHAPE = ["--layers", "6", "--q-heads", "2", "--kv-heads", "1", "--head-dim", "16"]
SHAPE += ["--rows", "400", "--examples", "40", "--set", "doc_spread=0.2"]
SAME_MIX = {"mix-a-1": 11, "mix-a-2": 12, "mix-a-3": 13}  # model id -> seed
OTHER_MIX = ("mix-b", 14)


def _ok(*args: str) -> None:
    r = CliRunner().invoke(app, list(args))
    assert r.exit_code == 0, r.output


@pytest.fixture(scope="module")
def synth_build(build_root) -> Built:
    root = build_root / "dataset_synth"
    wh = root / "qkwh.duckdb"
    captures = {**SAME_MIX, OTHER_MIX[0]: OTHER_MIX[1]}
    for model_id, seed in captures.items():
        extra = ["--set", "mu_q_a=8"] if model_id == OTHER_MIX[0] else []
        _ok("synth", str(root / model_id), *SHAPE, "--seed", str(seed), *extra)
        _ok(
            "ingest",
            str(root / model_id),
            "--model-id",
            model_id,
            "--dataset",
            model_id.rsplit("-", 1)[0] + f"-{seed}",
            "-w",
            str(wh),
        )
    _ok("compute", "--documents", "-w", str(wh), "--workers", "1")
    res = build(wh, target_dir=root / "target", log_sink=_quiet, dbt_vars={"n_boot": 400})
    return Built(wh, res)


def test_a_different_document_mix_is_told_apart_and_the_same_mix_is_not(synth_build):
    rows = synth_build.dicts(
        "SELECT * FROM dataset_comparisons WHERE metric = 'bias_strength' ORDER BY 1, 2"
    )
    assert len(rows) == 6  # every pair of the four captures of one hf_model
    assert all(r["interval"] == "layers+documents" for r in rows), rows
    assert all(r["se_documents_a"] > 0 and r["se_documents_b"] > 0 for r in rows)
    other = [r for r in rows if OTHER_MIX[0] in (r["model_a"], r["model_b"])]
    same = [r for r in rows if OTHER_MIX[0] not in (r["model_a"], r["model_b"])]
    assert len(other) == 3 and len(same) == 3
    assert all(r["distinguishable"] for r in other), other
    assert sum(bool(r["distinguishable"]) for r in same) <= 1, same
