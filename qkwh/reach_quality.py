"""How good is the softmax reach estimator?  Measure it on a capture that kept every key.

A capture made with ``--sampler all`` holds every position's query and key, and the exact
attention of every query row (docs/input-format.md).  Subsampling it at a keep rate (as a
``uniform`` capture with that base rate would have kept rows) and running the estimator on the
subsample, many times, gives the estimator's bias and spread against the exact values, per
distance bin and per head metric (docs/metrics/reach.md#how-good-is-the-estimate).

    python -m qkwh.reach_quality CAPTURE_FOLDER [--base-rate 1] [--keep-first 0] [--draws 100]
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from qkwh.analyses import reach
from qkwh.analyses.types import AttentionFacts, HeadData
from qkwh.reach_inputs import read_exact
from qkwh.sniffed.layout import scan
from qkwh.sniffed.metadata import read_metadata
from qkwh.sniffed.reader import read_file


@dataclass(frozen=True)
class Quality:
    """Bias (mean error) and spread (sd of the error over draws, averaged over heads) of the
    estimate against the exact value: per head metric and per distance bin."""

    facts: AttentionFacts
    n_heads: int
    draws: int
    metrics: dict[str, tuple[float, float]]  # metric -> (mean bias over heads, mean sd)
    bins: list[tuple[int, float, float]]  # (r, mean bias over heads, mean sd)
    mean_keys: float  # mean kept keys per document per draw


def capture_heads(folder: Path) -> list[HeadData]:
    """Every head of a capture with its exact columns (q files joined to their GQA k files)."""
    meta = read_metadata(folder)
    m = int(meta.get_int("sampling_bucket_size", "sampling_min_bucket_size") or 1)
    L = int(meta.get_int("tokenizer_max_length", "max_length") or 0)
    n_q = int(meta.get_int("head_sampling_num_query_heads", "num_attention_heads") or 1)
    n_kv = int(meta.get_int("head_sampling_num_key_heads", "num_key_value_heads") or 1)
    files = {(f.layer, f.head, f.kind): f.path for f in scan(folder).files}
    heads = []
    for (layer, head, kind), path in sorted(files.items()):
        if kind != "q" or (layer, head // (n_q // n_kv), "k") not in files:
            continue
        q, k = read_file(path), read_file(files[(layer, head // (n_q // n_kv), "k")])
        window = next((w for w in q.sliding_window_values if w is not None), None)
        heads.append(
            HeadData(
                q=q.vectors,
                q_pos=q.position,
                q_example=q.example_id,
                q_bucket=q.bucket,
                k=k.vectors,
                k_pos=k.position,
                k_example=k.example_id,
                k_bucket=k.bucket,
                context_length=L,
                bucket_size=m,
                sliding_window=window,
                layer=layer,
                q_head=head,
                exact=read_exact(path),
            )
        )
    return heads


def measure(heads: list[HeadData], facts: AttentionFacts, *, draws: int, seed: int = 0) -> Quality:
    """Bias and spread of the estimator at ``facts``' keep rate over ``draws`` subsamples of
    each head (each head with its own generator, seeded from ``seed``, layer and head)."""
    per_metric: dict[str, list[tuple[float, float]]] = {k: [] for k in reach.QUALITY_METRICS}
    per_bin: list[np.ndarray] = []
    sd_bin: list[np.ndarray] = []
    for h in heads:
        rng = np.random.default_rng([seed, h.layer, h.q_head])
        err = reach.estimate_errors(h, facts, draws=draws, rng=rng)
        for k in reach.QUALITY_METRICS:
            e = err[k][np.isfinite(err[k])]
            if e.size:
                per_metric[k].append((float(e.mean()), float(e.std(ddof=1)) if e.size > 1 else 0))
        per_bin.append(np.nanmean(err["bins"], axis=0))
        sd_bin.append(np.nanstd(err["bins"], axis=0, ddof=1))
    pi = reach.keep_probability(np.arange(heads[0].context_length), facts)
    bias_bins, spread_bins = np.nanmean(per_bin, axis=0), np.nanmean(sd_bin, axis=0)
    return Quality(
        facts=facts,
        n_heads=len(heads),
        draws=draws,
        metrics={
            k: (float(np.mean([b for b, _ in v])), float(np.mean([s for _, s in v])))
            for k, v in per_metric.items()
            if v
        },
        bins=[(r, float(bias_bins[r]), float(spread_bins[r])) for r in range(bias_bins.size)],
        mean_keys=float(pi.sum()),
    )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("capture", type=Path)
    ap.add_argument("--base-rate", type=float, action="append")
    ap.add_argument("--keep-first", type=int, default=0)
    ap.add_argument("--draws", type=int, default=100)
    args = ap.parse_args(argv)
    heads = capture_heads(args.capture)
    m = heads[0].bucket_size
    for rate in args.base_rate or [1.0]:
        q = measure(heads, AttentionFacts("uniform", m, rate, args.keep_first), draws=args.draws)
        print(
            json.dumps(
                {
                    "base_rate": rate,
                    "keep_first": args.keep_first,
                    "heads": q.n_heads,
                    "draws": q.draws,
                    "mean_keys_per_document": round(q.mean_keys, 1),
                    "metrics": {k: [round(b, 4), round(s, 4)] for k, (b, s) in q.metrics.items()},
                    "bins": [[r, round(b, 4), round(s, 4)] for r, b, s in q.bins],
                }
            )
        )


if __name__ == "__main__":
    main()
