"""What the ``reach`` analysis reads besides the vectors (docs/metrics/reach.md).

* The sampler facts and the attention scaling of a model, from its capture metadata
  (``models.metadata_json``, the saver state verbatim): :func:`attention_facts`,
  :func:`load_attention_facts`.  A model without them is left out of the analysis
  (:func:`missing_facts_warning`), and ingest records a finding (:func:`ingest_findings`).
* The exact attention recorded at capture, optional q-file columns ``attn_bins``,
  ``attn_distance``, ``attn_entropy`` and ``attn_sink`` (docs/input-format.md):
  :func:`read_exact`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qkwh.analyses.types import AttentionFacts, ExactAttention
from qkwh.capture.exact import SCALE_KEY, SOFTCAP_KEY

if TYPE_CHECKING:  # numpy only where the exact columns are read (compute's parent needs none)
    import numpy as np

#: the analysis that reads them (left out for a model without sampler facts)
REACH_ANALYSIS = "reach"
#: saver-state keys (``_saver_state.json`` model_metadata) written by ``qkwh capture``
KEEP_FIRST_KEY = "sampling_keep_first"
#: the optional q-file columns of the exact attention
EXACT_COLUMNS = ("attn_bins", "attn_distance", "attn_entropy", "attn_sink")
SAMPLERS = ("uniform", "log_uniform", "all")


def _number(value: Any) -> float | None:
    if value in (None, ""):
        return None
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def attention_facts(
    metadata: Mapping[str, Any], *, strategy: str | None = None, bucket_size: int | None = None
) -> tuple[AttentionFacts | None, str | None]:
    """(facts, None), or (None, what is missing) from a capture's metadata.  ``strategy`` and
    ``bucket_size``: the warehouse's resolved values (``models``), used before the metadata's."""
    raw = strategy or metadata.get("sampling_strategy")
    if raw in (None, ""):
        return None, "sampling_strategy"
    sampler = {"log": "log_uniform", "loguniform": "log_uniform"}.get(
        str(raw).strip().lower(), str(raw).strip().lower()
    )
    if sampler not in SAMPLERS:
        return None, f"sampling_strategy ({sampler!r} is not one of {', '.join(SAMPLERS)})"
    m = bucket_size or _number(
        metadata.get("sampling_bucket_size", metadata.get("sampling_min_bucket_size"))
    )
    if not m or m < 1:
        return None, "sampling_bucket_size"
    rate = _number(metadata.get("sampling_base_rate"))
    if sampler != "all" and (rate is None or rate <= 0):
        return None, "sampling_base_rate"
    keep_first = _number(metadata.get(KEEP_FIRST_KEY))
    scale = _number(metadata.get(SCALE_KEY))
    cap = _number(metadata.get(SOFTCAP_KEY))
    return (
        AttentionFacts(
            sampler=sampler,
            sampler_bucket_size=int(m),
            base_rate=float(rate if rate is not None else 1.0),
            keep_first=int(keep_first or 0),
            scaling=scale if scale and scale > 0 else None,
            softcap=cap if cap and cap > 0 else None,
        ),
        None,
    )


def load_attention_facts(con, models: Sequence[str] | None = None) -> dict[str, AttentionFacts]:
    """model_id -> its :class:`AttentionFacts`, for ``models`` (None: every model); models
    without sampler facts are absent."""
    rows = con.execute(
        "SELECT model_id, sampling_strategy, bucket_size, metadata_json FROM models "
        "WHERE ? IS NULL OR list_contains(?, model_id)",
        [list(models) if models else None, list(models) if models else None],
    ).fetchall()
    out: dict[str, AttentionFacts] = {}
    for model_id, strategy, bucket_size, meta in rows:
        try:
            metadata = json.loads(meta) if meta else {}
        except ValueError:
            metadata = {}
        facts, _ = attention_facts(
            metadata if isinstance(metadata, dict) else {},
            strategy=strategy,
            bucket_size=bucket_size,
        )
        if facts is not None:
            out[model_id] = facts
    return out


def missing_facts_warning(model_ids: Sequence[str]) -> str:
    """The one line compute prints for the models left out of the reach analysis (all of them
    in one line: the analysis is in the default set, so a warehouse of captures without sampler
    facts would otherwise warn once per model on every compute)."""
    ids = ", ".join(repr(m) for m in model_ids)
    first = model_ids[0] if model_ids else "MODEL"
    return (
        f"{REACH_ANALYSIS} left out for {'model' if len(model_ids) == 1 else 'models'} {ids}: "
        f"the capture's sampler facts are unknown (the other analyses run; "
        f"`qkwh findings {first}` says what is missing)"
    )


def ingest_findings(metadata: Mapping[str, Any], *, strategy: str, bucket_size: int) -> list:
    """The ingest finding of a dataset whose sampler facts are incomplete (none otherwise)."""
    from qkwh.sniffed.validate import Finding

    _, missing = attention_facts(metadata, strategy=strategy, bucket_size=bucket_size)
    if missing is None:
        return []
    return [
        Finding(
            "info",
            None,
            "reach_sampler",
            f"the capture metadata has no {missing}: keep probabilities are unknown, so the "
            f"{REACH_ANALYSIS} analysis will not run on this model",
        )
    ]


def read_exact(path: Path | str) -> ExactAttention | None:
    """The exact-attention columns of a q file, in file order, or None when it has none.
    A row without them holds NaN."""
    import numpy as np

    from qkwh.errors import InputError
    from qkwh.sniffed.reader import _open, location

    pf = _open(location(path))
    if not set(EXACT_COLUMNS) <= set(pf.schema_arrow.names):
        return None
    table = pf.read(columns=list(EXACT_COLUMNS))
    n = table.num_rows

    def scalar(name: str) -> np.ndarray:
        col = table.column(name)
        return np.asarray(col.to_numpy(zero_copy_only=False), dtype=np.float64).reshape(n)

    bins_col = table.column("attn_bins").combine_chunks()
    lengths = np.asarray(
        [0 if v is None else len(v) for v in bins_col.to_pylist()]
        if bins_col.null_count
        else np.diff(bins_col.offsets.to_numpy()),
        dtype=np.int64,
    )
    width = int(lengths.max()) if n else 0
    bins = np.full((n, width), np.nan)
    if n and width:
        full = lengths == width
        if not full.any():
            raise InputError(f"{path}: column attn_bins holds no complete row")
        values = None if full.all() else bins_col.to_pylist()
        if values is None:
            bins[:] = np.asarray(bins_col.flatten().to_numpy(zero_copy_only=False)).reshape(
                n, width
            )
        else:
            for i, v in enumerate(values):
                if v is not None:
                    bins[i, : len(v)] = v
    return ExactAttention(
        bins=bins,
        distance=scalar("attn_distance"),
        entropy=scalar("attn_entropy"),
        sink=scalar("attn_sink"),
    )
