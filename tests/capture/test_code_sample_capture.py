"""warehouse/sample/smollm2-135m-code can be remade: `qkwh capture` with the command its card
gives, on its first document (argparse.py of Debian's CPython 3.11) cut to 1024 tokens, writes
the rows the shipped files hold for that document at those positions (a causal model: a
position's vectors depend on the tokens up to it only, and the position masks of a shorter
context are the first positions of the longer one's): the same positions and buckets exactly,
the same vectors to float32 rounding accumulated through the model (see ROW_RTOL)."""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from capture_helpers import need_capture_extra, smollm2_gguf
from typer.testing import CliRunner

from qkwh.cli import app
from qkwh.paths import CODE_SAMPLE_DIR

need_capture_extra()
pytestmark = pytest.mark.slow

MAKE_SCRIPT = CODE_SAMPLE_DIR.parent / "make_code_sample.py"
PREFIX = 1024  # tokens re-captured (two buckets of 512)

#: Largest relative difference ||got - shipped|| / ||shipped|| allowed for a row.  The weights
#: are the same on every machine (the GGUF file de-quantized to float32), but torch's float32
#: kernels sum in an order that depends on the CPU (SIMD width, threads, the BLAS build): each
#: sum then differs by a few float32 ulps (~1e-7 relative), and 30 layers of attention and MLP
#: carry that to ~1e-5 .. 1e-4 of a row's norm.  Every defect this test guards against moves a
#: row by order 1: another head or layer, a missing q/k norm, pre- instead of post-RoPE, a
#: position off by one (its fastest plane turns by a radian), another token or document.  1e-3
#: sits an order above the rounding and three below a defect.  Positions and buckets (the
#: sampling) are compared exactly.
ROW_RTOL = 1e-3


def _modules() -> dict[str, str]:
    spec = importlib.util.spec_from_file_location("make_code_sample", MAKE_SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.MODULES


def test_recapture_of_the_first_document_matches_the_shipped_rows(tmp_path: Path):
    name, digest = next(iter(_modules().items()))  # document 0
    source = Path("/usr/lib/python3.11") / name
    if not source.is_file() or hashlib.sha256(source.read_bytes()).hexdigest() != digest:
        pytest.skip(f"{source}: not the text the sample was captured on (Debian's CPython 3.11.2)")
    out = tmp_path / "recapture"
    r = CliRunner().invoke(
        app,
        [
            "capture", str(smollm2_gguf()), "--texts", str(source), "--out", str(out),
            "--max-length", str(PREFIX), "--bucket-size", "512", "--base-rate", "15",
            "--heads", "60", "--head-seed", "0",
            "--keep-first", "0",  # the sample was captured before keep-first existed
        ],
    )  # fmt: skip
    assert r.exit_code == 0, r.output + r.stderr
    compared = 0
    for shipped in sorted(CODE_SAMPLE_DIR.glob("l*h*[qk]/data.parquet")):
        want = pq.read_table(shipped)
        keep = (want.column("example_id").to_numpy() == 0) & (
            want.column("position").to_numpy() < PREFIX
        )
        want = want.filter(keep)
        got = pq.read_table(out / shipped.parent.name / "data.parquet")
        assert got.column("position").to_pylist() == want.column("position").to_pylist(), shipped
        assert got.column("bucket").to_pylist() == want.column("bucket").to_pylist(), shipped
        a = np.stack(got.column("vector").to_numpy(zero_copy_only=False))
        b = np.stack(want.column("vector").to_numpy(zero_copy_only=False))
        assert a.dtype == b.dtype == np.float32 and a.shape == b.shape, shipped
        diff = np.linalg.norm(a.astype(np.float64) - b, axis=1)
        scale = np.linalg.norm(b.astype(np.float64), axis=1)
        worst = float(np.max(diff / scale)) if len(a) else 0.0
        assert worst <= ROW_RTOL, (shipped, worst)
        compared += len(a)
    assert compared > 500  # about 22 files x 30 rows (2 buckets x base rate 15)
