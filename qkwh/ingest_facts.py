"""What the warehouse records of an ingested model: its facts, their fingerprint, the RoPE rows.

:func:`resolve_facts` combines ``--model-id``, the model registry (configs/models.csv) and the
dataset metadata into the :class:`ModelFacts` of one model (docs/input-format.md); the helpers
here add the findings the metadata raises and the ``rope_frequencies`` rows of the captured
layers.  Nothing here touches the warehouse.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass

from qkwh import rope_sources
from qkwh.errors import InputError
from qkwh.models_csv import ModelEntry, match
from qkwh.sniffed.metadata import DatasetMetadata
from qkwh.sniffed.validate import FileStats, Finding, infer_bucket_size


@dataclass(frozen=True)
class ModelFacts:
    """What the warehouse records of a model (columns of ``models``)."""

    model_id: str
    hf_model: str | None
    family: str | None
    label: str | None
    dataset: str | None
    params_b: float | None
    num_layers: int | None
    num_q_heads: int
    num_kv_heads: int
    gqa_ratio: int
    head_dim: int
    context_length: int
    context_length_rule: str
    bucket_size: int
    sampling_strategy: str
    rope_theta: float | None
    rope_scaling: str | None
    nope_layers: str | None
    cross_attention_layers: str | None
    checkpoint_phase: str | None
    checkpoint_step: int | None
    checkpoint_order: int | None
    study: str | None
    dataset_branch: str | None
    in_registry: bool


def resolve_facts(
    *,
    model_id: str | None,
    names: list[str],
    meta: DatasetMetadata,
    stats: list[FileStats],
    registry: dict[str, ModelEntry],
    source: str,
    family: str | None = None,
    label: str | None = None,
    dataset: str | None = None,
) -> tuple[ModelFacts, list[Finding]]:
    """Combine --model-id, the registry and the dataset metadata (docs/input-format.md#which-model-and-its-facts).

    ``family`` and ``label`` (``--family`` / ``--label``) name the model in reports; given, they
    win over the registry (a different registry family is recorded as a warning).  ``dataset``
    (``--dataset``) names the text the capture ran on; else the capture metadata's
    (:func:`metadata_dataset`).
    """
    findings: list[Finding] = []
    family = (family or "").strip() or None
    label = (label or "").strip() or None
    dataset = (dataset or "").strip() or None
    entry = (
        registry.get(model_id)
        if model_id
        else match(
            registry,
            candidates=[*names, meta.get_str("dataset_branch") or ""],
            hf_model=meta.model_name,
        )
    )
    if model_id is None:
        if entry is None:
            same = sorted(
                m for m, e in registry.items() if meta.model_name and e.hf_model == meta.model_name
            )
            raise InputError(
                f"{source}: unknown model (not in configs/models.csv by branch, folder name or "
                f"model name {meta.model_name!r}"
                + (f", which fits several entries: {', '.join(same)}" if len(same) > 1 else "")
                + "); pass --model-id ID"
            )
        model_id = entry.model_id

    # head counts: metadata first, then the registry
    n_q = meta.get_int("head_sampling_num_query_heads", "num_attention_heads")
    n_kv = meta.get_int("head_sampling_num_key_heads", "num_key_value_heads")
    if entry is not None:
        for name, ours, theirs in (
            ("num_q_heads", n_q, entry.num_q_heads),
            ("num_kv_heads", n_kv, entry.num_kv_heads),
        ):
            if ours is not None and theirs is not None and ours != theirs:
                findings.append(
                    Finding(
                        "warning",
                        None,
                        "registry_mismatch",
                        f"{name}: dataset metadata says {ours}, registry says {theirs}; using metadata",
                    )
                )
        n_q = n_q if n_q is not None else entry.num_q_heads
        n_kv = n_kv if n_kv is not None else entry.num_kv_heads
    if n_q is None or n_kv is None:
        raise InputError(
            f"{source}: cannot tell the number of query and key heads (no _saver_state.json "
            f"head_sampling_num_query_heads/_key_heads and no registry entry for {model_id!r})"
        )
    if n_kv <= 0 or n_q % n_kv:
        raise InputError(f"{source}: {n_q} query heads are not a multiple of {n_kv} key heads")
    ratio = n_q // n_kv
    d = stats[0].d

    strategy = meta.sampling_strategy()
    if entry is not None and entry.bucket_size:
        bucket_size, bucket_rule = entry.bucket_size, "registry"
        meta_m = meta.get_int("sampling_bucket_size", "sampling_min_bucket_size")
        if meta_m is not None and meta_m != entry.bucket_size:
            findings.append(
                Finding(
                    "warning",
                    None,
                    "registry_mismatch",
                    f"bucket size: metadata says {meta_m}, registry says {entry.bucket_size}; using registry",
                )
            )
    else:
        bucket_size = meta.get_int("sampling_bucket_size", "sampling_min_bucket_size")  # type: ignore[assignment]
        bucket_rule = "metadata"
        if bucket_size is None:
            bucket_size, bucket_rule = infer_bucket_size(stats), "data"
            if bucket_size is None:
                raise InputError(
                    f"{source}: cannot tell the bucket size (no metadata, no registry entry, "
                    "and the bucket ids fit no uniform bucket size)"
                )
    if bucket_rule != "registry":
        findings.append(
            Finding("info", None, "bucket_size", f"bucket size {bucket_size} from {bucket_rule}")
        )

    max_pos = max((s.max_position for s in stats if s.max_position is not None), default=0)
    max_bucket = max((s.max_bucket for s in stats if s.max_bucket is not None), default=0)
    if entry is not None and entry.context_length:
        l_ctx, rule = entry.context_length, "registry"
    elif meta.get_int("tokenizer_max_length", "max_length"):
        l_ctx, rule = meta.get_int("tokenizer_max_length", "max_length"), "metadata"  # type: ignore[assignment]
    elif bucket_rule == "metadata" and strategy != "log_uniform":
        l_ctx, rule = (max_bucket + 1) * bucket_size, "metadata_buckets"
    else:
        l_ctx, rule = max_pos + 1, "max_position"

    e = entry
    facts = ModelFacts(
        model_id=model_id,
        hf_model=meta.model_name or (e.hf_model if e else None),
        family=family or (e.family if e else None),
        label=label,
        dataset=dataset or metadata_dataset(meta),
        params_b=e.params_b if e else None,
        num_layers=(e.num_layers if e else None)
        or meta.get_int("num_hidden_layers", "head_sampling_num_layers"),
        num_q_heads=n_q,
        num_kv_heads=n_kv,
        gqa_ratio=ratio,
        head_dim=d,
        context_length=int(l_ctx),
        context_length_rule=rule,
        bucket_size=int(bucket_size),
        sampling_strategy=strategy,
        rope_theta=(e.rope_theta if e else None) or _float(meta.metadata.get("rope_theta")),
        rope_scaling=e.rope_scaling if e else meta.get_str("rope_type"),
        nope_layers=e.nope_layers if e else None,
        cross_attention_layers=e.cross_attention_layers if e else None,
        checkpoint_phase=e.checkpoint_phase if e else None,
        checkpoint_step=e.checkpoint_step if e else None,
        checkpoint_order=e.checkpoint_order if e else None,
        study=e.study if e else None,
        dataset_branch=(e.dataset_branch if e else None) or meta.get_str("dataset_branch"),
        in_registry=e is not None,
    )
    if e is not None and family and e.family and family != e.family:
        findings.append(
            Finding(
                "warning",
                None,
                "registry_mismatch",
                f"family: --family says {family}, registry says {e.family}; using --family",
            )
        )
    if e is not None and e.head_dim and e.head_dim != d:
        findings.append(
            Finding(
                "warning",
                None,
                "registry_mismatch",
                f"head_dim: files have {d}, registry says {e.head_dim}",
            )
        )
    return facts, findings


def metadata_dataset(meta: DatasetMetadata) -> str | None:
    """The text a capture ran on, as its metadata records it: ``dataset`` when given, else
    ``source_dataset`` (what `qkwh capture` writes: a Hub dataset id, a file name, or a label)
    with ``/dataset_name`` (the Hub subset) when there is one; None when neither is recorded."""
    explicit = meta.get_str("dataset")
    if explicit:
        return explicit.strip() or None
    source = (meta.get_str("source_dataset") or "").strip()
    if not source:
        return None
    subset = (meta.get_str("dataset_name") or "").strip()
    return f"{source}/{subset}" if subset else source


def _float(v) -> float | None:
    try:
        return float(v) if v not in (None, "") else None
    except (TypeError, ValueError):
        return None


def source_fingerprint(stats: list[FileStats], facts: ModelFacts, rope: dict | None = None) -> str:
    """Hash of the files, the facts and the resolved RoPE frequency rows (a frequency source that
    appears later, e.g. a config.json now cached, makes the same files ingest again)."""
    h = hashlib.sha256()
    for s in sorted(stats, key=lambda s: s.file.config_name):
        h.update(f"{s.file.config_name}:{s.fingerprint}:{s.file.path}\n".encode())
    h.update(json.dumps(asdict(facts), sort_keys=True, default=str).encode())
    h.update(json.dumps(rope, sort_keys=True, default=repr).encode())
    return h.hexdigest()[:32]


def _rope_rows(
    meta: DatasetMetadata,
    stats: list[FileStats],
    facts: ModelFacts,
    registry: dict[str, ModelEntry],
    *,
    hub: bool,
) -> tuple[dict | None, list[Finding]]:
    """Rows of ``rope_frequencies`` for the captured layers (None when unknown) and the finding
    saying where they came from or what is missing (qkwh.rope_sources); never fails the ingest."""
    entry = registry.get(facts.model_id) if facts.in_registry else None
    resolved, findings = rope_sources.resolve(
        meta=meta,
        layers={s.file.layer for s in stats},
        head_dim=facts.head_dim,
        rope_theta=facts.rope_theta,
        rope_type=meta.get_str("rope_type") or facts.rope_scaling,
        nope_layers=facts.nope_layers,
        hf_model=facts.hf_model,
        hf_revision=entry.hf_revision if entry else None,
        allow_download=hub,
    )
    if resolved is None:
        return None, findings
    return resolved.rows(
        facts.model_id,
        head_dim=facts.head_dim,
        bucket_size=facts.bucket_size,
        context_length=facts.context_length,
    ), findings


def _metadata_findings(meta: DatasetMetadata, stats: list[FileStats]) -> list[Finding]:
    out: list[Finding] = []
    if not meta.sources:
        out.append(
            Finding(
                "info",
                None,
                "metadata",
                "no _saver_state.json or dataset card; facts from registry/data",
            )
        )
    n_q_files = sum(1 for s in stats if s.file.kind == "q")
    selected = meta.get_int("head_sampling_selected_query_heads")
    if selected is not None and selected != n_q_files:
        out.append(
            Finding(
                "info",
                None,
                "head_count",
                f"metadata selected {selected} query heads; the folder holds {n_q_files} q files",
            )
        )
    if meta.bucket_counts:
        total_meta = sum(meta.bucket_counts.values())
        total = sum(s.rows for s in stats)
        if total_meta != total:
            out.append(
                Finding(
                    "info",
                    None,
                    "bucket_counts",
                    f"metadata bucket_counts sum to {total_meta:,} rows; files hold {total:,}",
                )
            )
    return out
