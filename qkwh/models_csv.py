"""The model registry: ``configs/models.csv`` (a copy of the reference registry).

One row per known model or checkpoint: architecture, capture settings (context length, bucket
size), RoPE facts, NoPE / cross-attention layers, checkpoint phase and step, dataset branch.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from qkwh.paths import REGISTRY_CSV

BRANCH_SUFFIX = "-longbench-pro-128k-plus"


@dataclass(frozen=True)
class ModelEntry:
    model_id: str
    hf_model: str | None
    hf_revision: str | None
    dataset_branch: str | None
    family: str | None
    params_b: float | None
    num_layers: int | None
    num_q_heads: int | None
    num_kv_heads: int | None
    head_dim: int | None
    gqa_ratio: int | None
    context_length: int | None
    bucket_size: int | None
    rope_theta: float | None
    rope_scaling: str | None
    nope_layers: str | None
    cross_attention_layers: str | None
    sliding_window: int | None
    checkpoint_phase: str | None
    checkpoint_step: int | None
    study: str | None
    claimed_context_length: int | None
    head_sampling_count: int | None
    n_heads_analyzed: int | None
    checkpoint_order: int | None


_INT = {
    "num_layers",
    "num_q_heads",
    "num_kv_heads",
    "head_dim",
    "gqa_ratio",
    "context_length",
    "bucket_size",
    "sliding_window",
    "checkpoint_step",
    "claimed_context_length",
    "head_sampling_count",
    "n_heads_analyzed",
    "checkpoint_order",
}
_FLOAT = {"params_b", "rope_theta"}


def _parse(name: str, raw: str) -> Any:
    raw = raw.strip()
    if raw == "":
        return None
    if name in _INT:
        return int(float(raw))
    if name in _FLOAT:
        return float(raw)
    return raw


def load_registry(path: Path = REGISTRY_CSV) -> dict[str, ModelEntry]:
    """All registry entries keyed by model_id."""
    names = [f.name for f in fields(ModelEntry)]
    out: dict[str, ModelEntry] = {}
    with open(path, newline="") as fh:
        for row in csv.DictReader(fh):
            entry = ModelEntry(**{n: _parse(n, row.get(n, "")) for n in names})
            out[entry.model_id] = entry
    return out


def match(
    registry: dict[str, ModelEntry], *, candidates: list[str], hf_model: str | None = None
) -> ModelEntry | None:
    """Find the registry entry a dataset belongs to.

    ``candidates`` are names the dataset goes by (a Hub branch, a folder name, the metadata's
    ``dataset_branch``); each is tried as a model_id, as a dataset branch and with the
    ``-longbench-pro-128k-plus`` suffix stripped.  Failing that, a unique entry whose
    ``hf_model`` equals the metadata's model name.
    """
    by_branch = {e.dataset_branch: e for e in registry.values() if e.dataset_branch}
    for name in candidates:
        if not name:
            continue
        for key in (name, name.removesuffix(BRANCH_SUFFIX)):
            if key in registry:
                return registry[key]
            if key in by_branch:
                return by_branch[key]
    if hf_model:
        hits = [e for e in registry.values() if e.hf_model == hf_model]
        if len(hits) == 1:
            return hits[0]
    return None
