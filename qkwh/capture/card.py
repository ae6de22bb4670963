"""The dataset card (``README.md``) of a capture.

Its ``- `key`: `value``` lines are the metadata the sniffer's cards carry, which
:func:`qkwh.sniffed.metadata.parse_card` reads back; the rest is prose for a person.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from qkwh.capture.parts import FinalFile


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.10g}"
    return str(value).replace("`", "'")


def render_card(
    *,
    model_name: str,
    metadata: dict[str, Any],
    files: Iterable[FinalFile],
    bucket_counts: dict[int, int],
    skipped_sliding_layers: Iterable[int] = (),
) -> str:
    files = sorted(files, key=lambda f: (f.layer, f.kind, f.head))
    n_rows = sum(f.rows for f in files)
    q_files = [f for f in files if f.kind == "q"]
    k_files = [f for f in files if f.kind == "k"]
    strategy = metadata.get("sampling_strategy")
    if strategy == "log_uniform":
        bucket_rule = (
            f"`log_uniform`: bucket = max(P, floor(log2(position + 1))), P = log2 of the minimum "
            f"bucket size {metadata.get('sampling_min_bucket_size')}; keep probability "
            f"min(1, base_rate / 2^bucket) with base_rate {_fmt(metadata.get('sampling_base_rate'))}"
        )
    elif strategy == "all":
        bucket_rule = f"`all`: every position kept; bucket = floor(position / {metadata.get('sampling_bucket_size')})"
    else:
        bucket_rule = (
            f"`uniform`: bucket = floor(position / {metadata.get('sampling_bucket_size')}); keep "
            f"probability {_fmt(metadata.get('sampling_keep_probability'))} per position "
            f"(base_rate {_fmt(metadata.get('sampling_base_rate'))})"
        )
    sliding = sorted(set(skipped_sliding_layers))
    if metadata.get("head_sampling_full_attention_only"):
        window_note = "Sliding-window layers are not captured (full attention only)" + (
            f"; skipped layers: {', '.join(map(str, sliding))}."
            if sliding
            else "; the model has none."
        )
    else:
        windows = sorted({f.sliding_window for f in files if f.sliding_window is not None})
        window_note = (
            "Sliding-window layers are captured; their files record the window in `sliding_window` "
            f"({', '.join(map(str, windows)) or 'none captured'} tokens)."
        )
    lines = [
        f"# {model_name}: post-RoPE query/key capture",
        "",
        "Query and key vectors exactly as the model's attention receives them (after per-head q/k norms",
        "where the architecture has them, after RoPE on RoPE layers, raw projections on NoPE layers; keys",
        "before the grouped-query repetition), written by `qkwh capture` in the sniffer layout: one",
        "`l{LL}h{HH}{q|k}/data.parquet` per (layer, head, kind), zstd. For `k` files `HH` is the key/value",
        "head; query head h uses key head h // (query heads / key heads).",
        "",
        "## Sampling",
        f"- positions: {bucket_rule}",
        "- one mask per (example, layer, kind), shared by all heads of that layer and kind; query and key",
        "  masks are independent, so a q file and its k file hold different positions",
        f"- heads: {metadata.get('head_sampling_selected_query_heads')} query heads sampled with seed "
        f"{metadata.get('head_sampling_seed')} ({len(q_files)} q files, {len(k_files)} k files, {n_rows} rows)",
        f"- {window_note}",
        f"- documents: {metadata.get('num_examples')} from `{_fmt(metadata.get('source_dataset'))}`, truncated to "
        f"{metadata.get('tokenizer_max_length')} tokens, batch size 1, no padding; {metadata.get('total_tokens')} tokens",
        "",
        "## Columns",
        "| column | type | meaning |",
        "| --- | --- | --- |",
        "| `bucket` | int32 | position bucket id (rule above) |",
        "| `example_id` | int32 | document id (source id as a 64-bit integer, wrapped to 32 bits) |",
        "| `position` | int32 | 0-based token index in the document |",
        f"| `vector` | fixed_size_list<float32>[{metadata.get('head_dim')}] | the query or key vector |",
        "| `sliding_window` | int32 | attention window in tokens; null for full attention |",
        "",
        "## Current Specialization Metadata",
        f"- `model`: `{_fmt(model_name)}`",
    ]
    lines += [f"- `{key}`: `{_fmt(value)}`" for key, value in sorted(metadata.items())]
    lines += [
        f"- `captured_configs`: `{len(files)}`",
        f"- `captured_rows`: `{n_rows}`",
        "- `bucket_counts`: " + ", ".join(f"b{b}={c}" for b, c in sorted(bucket_counts.items())),
        "",
    ]
    return "\n".join(lines)
