"""Run a capture: documents through the model, sampled Q/K rows into the sniffer layout.

One example at a time (batch size 1, no padding, truncation to ``max_length``): the forward
pass runs with the attention hook of :mod:`qkwh.capture.model`; for every sampled layer and kind
the position mask of :func:`~qkwh.capture.sampling.keep_mask` picks the rows of the sampled
heads, which go to the example's part file (:mod:`qkwh.capture.parts`).  When every example is
done the part files become the final files, ``_saver_state.json``, the dataset card and
``_capture_settings.json``.

Re-running the same command on the same output folder resumes an interrupted capture at the next
unfinished example, or changes nothing if the capture is complete; other settings on a folder
that holds a capture are refused.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from qkwh.capture import parts as P
from qkwh.capture.card import render_card
from qkwh.capture.exact import (
    SCALE_KEY,
    SOFTCAP_KEY,
    LayerAttention,
    config_metadata,
    exact_attention,
    layer_attention,
)
from qkwh.capture.model import DTYPES, resolve
from qkwh.capture.sampling import (
    HeadSelection,
    SamplerSpec,
    keep_mask,
    select_heads,
    stored_example_id,
)
from qkwh.capture.sources import HUB_PREFIX, TextSource, open_source
from qkwh.errors import InputError, MissingExtraError
from qkwh.sniffed.writer import atomic_write_bytes, write_saver_state

SETTINGS_FILE = "_capture_settings.json"
DEFAULT_BUCKETS = (
    16  # buckets per context when --bucket-size is not given (the public protocol's count)
)


@dataclass(frozen=True)
class CaptureSettings:
    """Everything that determines a capture's output (the CLI options).

    max_length : tokens per document after truncation (default: the model's max_position_embeddings)
    bucket_size : bucket size m in tokens (default: max_length // 16); must divide max_length for
        the uniform and all samplers
    heads / head_seed : number of sampled query heads and the seed of the sample
    examples : at most this many documents (default: all)
    include_sliding : also sample heads of sliding-window layers (default: full attention only)
    split / text_column / id_column / subset : how to read a JSONL, parquet or Hub source
    """

    model: str
    texts: tuple[str, ...]
    max_length: int | None = None
    bucket_size: int | None = None
    sampler: str = "uniform"
    base_rate: float = 1.0
    keep_first: int = 4
    heads: int = 300
    head_seed: int = 0
    examples: int | None = None
    dtype: str = "float32"
    include_sliding: bool = False
    split: str = "train"
    text_column: str = "text"
    id_column: str | None = None
    subset: str | None = None

    def normalised(self) -> CaptureSettings:
        """Local paths made absolute, so the same capture is recognised from any directory."""

        def norm(s: str) -> str:
            return (
                s
                if s.startswith(HUB_PREFIX) or not Path(s).expanduser().exists()
                else str(Path(s).expanduser().resolve())
            )

        return dataclasses.replace(
            self, model=norm(self.model), texts=tuple(norm(t) for t in self.texts)
        )

    def check(self) -> None:
        """Cheap checks before anything is loaded; raises InputError."""
        if self.max_length is not None and self.max_length < 1:
            raise InputError(f"--max-length must be at least 1 token, not {self.max_length}")
        if self.bucket_size is not None and self.bucket_size < 1:
            raise InputError(f"--bucket-size must be at least 1 token, not {self.bucket_size}")
        if self.heads < 1:
            raise InputError(f"--heads must be at least 1, not {self.heads}")
        if self.examples is not None and self.examples < 1:
            raise InputError(f"--examples must be at least 1, not {self.examples}")
        try:
            SamplerSpec(self.sampler, self.bucket_size or 1, self.base_rate, self.keep_first)
        except ValueError as exc:
            raise InputError(f"--sampler/--base-rate/--keep-first: {exc}") from None
        if self.dtype not in DTYPES:
            raise InputError(f"--dtype must be one of {', '.join(DTYPES)}, not {self.dtype!r}")
        resolve(self.model)


@dataclass
class CaptureReport:
    out: Path
    status: str  # 'captured' | 'resumed' | 'unchanged'
    model_name: str = ""
    n_examples: int = 0
    n_resumed: int = 0
    total_tokens: int = 0
    n_files: int = 0
    n_rows: int = 0
    skipped_sliding_layers: list[int] = field(default_factory=list)

    def summary(self) -> str:
        if self.status == "unchanged":
            return f"{self.out}: capture already complete with these settings; nothing to do"
        resumed = f" ({self.n_resumed} done before the interruption)" if self.n_resumed else ""
        return (
            f"{self.out}: {self.n_examples} examples{resumed}, {self.total_tokens:,} tokens -> "
            f"{self.n_files} files, {self.n_rows:,} rows"
        )


@dataclass(frozen=True)
class Plan:
    """Settings resolved against the model: what the capture will write."""

    max_length: int
    spec: SamplerSpec
    selection: HeadSelection

    def as_dict(self) -> dict[str, Any]:
        return {
            "max_length": self.max_length,
            "sampler": dataclasses.asdict(self.spec),
            "query_heads": {str(k): list(v) for k, v in self.selection.query_heads.items()},
            "key_heads": {str(k): list(v) for k, v in self.selection.key_heads.items()},
        }


def _settings_json(settings: CaptureSettings) -> dict[str, Any]:
    return {"settings": dataclasses.asdict(settings)}


def _fingerprint(settings: CaptureSettings) -> str:
    return hashlib.sha256(
        json.dumps(_settings_json(settings), sort_keys=True).encode()
    ).hexdigest()[:32]


def _check_out(out: Path, settings: CaptureSettings) -> str:
    """'new', 'resume' or 'complete' for ``out``; InputError if it holds something else."""
    fp = _fingerprint(settings)
    if not out.exists():
        return "new"
    if not out.is_dir():
        raise InputError(f"{out}: exists and is not a folder")
    wd = P.work_dir(out) / P.SETTINGS
    final = out / SETTINGS_FILE
    for path, state in ((wd, "resume"), (final, "complete")):
        if path.is_file():
            try:
                old = json.loads(path.read_text())
            except (json.JSONDecodeError, UnicodeDecodeError):
                raise InputError(f"{path}: not valid JSON; remove {out} to start over") from None
            if old.get("fingerprint") != fp:
                diff = [
                    k
                    for k, v in _settings_json(settings)["settings"].items()
                    if (old.get("settings") or {}).get(k)
                    != (list(v) if isinstance(v, tuple) else v)
                ]
                raise InputError(
                    f"{out}: holds a capture made with other settings ({', '.join(diff) or 'unknown'} "
                    "differ); choose another --out or remove it"
                )
            return state
    if any(p for p in out.iterdir() if p != P.work_dir(out) or any(p.iterdir())):
        raise InputError(f"{out}: folder is not empty and holds no capture; choose another --out")
    return "new"


def plan(settings: CaptureSettings, info: Any) -> Plan:
    """Resolve max length, bucket size and heads against the model (InputError when impossible)."""
    max_length = settings.max_length or info.max_position_embeddings
    if not max_length:
        raise InputError(
            f"{settings.model}: the model config has no max_position_embeddings; pass --max-length"
        )
    max_length = int(max_length)
    bucket = settings.bucket_size or max(1, max_length // DEFAULT_BUCKETS)
    if settings.sampler != "log_uniform" and max_length % bucket:
        raise InputError(
            f"--bucket-size {bucket} does not divide --max-length {max_length}: "
            f"{settings.sampler} buckets must tile the context"
        )
    spec = SamplerSpec(settings.sampler, bucket, settings.base_rate, settings.keep_first)
    try:
        selection = select_heads(
            num_layers=info.num_layers,
            num_query_heads=info.num_query_heads,
            num_key_heads=info.num_key_heads,
            count=settings.heads,
            seed=settings.head_seed,
            sliding_layers=info.sliding_layers,
            full_attention_only=not settings.include_sliding,
        )
    except ValueError as exc:
        raise InputError(f"{settings.model}: {exc}") from None
    return Plan(max_length, spec, selection)


class _Collector:
    """Attention callback: the sampled rows of the current example."""

    def __init__(self, plan: Plan, full_attention_only: bool):
        self.plan = plan
        self.full_only = full_attention_only
        self.example: P.ExampleRows | None = None
        self.skipped_sliding: set[int] = set()
        self.seen: set[int] = set()
        self.attention: dict[int, LayerAttention] = {}
        self.seen_ever: set[int] = set()  # layer -> its softmax (exact attention)

    def layer_attention(self, layer: int, module: Any, kwargs: dict[str, Any]) -> None:
        """Called by the hook before each attention call: the layer's scaling and soft-cap."""
        self.attention[layer] = layer_attention(
            module, kwargs, int(getattr(module, "head_dim", 0) or 0) or 1
        )

    def metadata(self) -> dict[str, Any]:
        """The attention scaling and soft-cap of the captured layers, for the saver state (one
        value when every captured layer agrees; otherwise the keys are left out)."""
        out: dict[str, Any] = {}
        used = [a for layer, a in sorted(self.attention.items()) if layer in self.seen_ever]
        for key, values in (
            (SCALE_KEY, {a.scaling for a in used}),
            (SOFTCAP_KEY, {a.softcap for a in used}),
        ):
            if len(values) == 1 and None not in values:
                out[key] = values.pop()
        return out

    def __call__(self, layer: int, query: Any, key: Any, sliding_window: int | None) -> None:
        import torch

        ex = self.example
        sel = self.plan.selection
        if ex is None or layer not in sel.query_heads:
            return
        if self.full_only and sliding_window is not None:
            self.skipped_sliding.add(layer)
            return
        if query.shape[0] != 1:
            raise RuntimeError(
                f"capture runs one example at a time; attention got a batch of {query.shape[0]}"
            )
        seq_len = int(query.shape[-2])
        for kind, heads, tensor in (
            ("q", sel.query_heads[layer], query),
            ("k", sel.key_heads[layer], key),
        ):
            keep = np.flatnonzero(
                keep_mask(
                    self.plan.spec,
                    example_id=ex.example_id,
                    layer=layer,
                    kind=kind,
                    seq_len=seq_len,
                )
            )
            if keep.size == 0:
                continue
            idx = torch.from_numpy(keep).to(tensor.device)
            rows = (
                tensor[0]
                .index_select(0, torch.tensor(heads, device=tensor.device))
                .index_select(1, idx)
            )
            vectors = rows.detach().to(device="cpu", dtype=torch.float32).numpy()  # (n_heads, K, d)
            if kind == "q" and layer in self.attention:
                ratio = max(1, int(query.shape[1]) // int(key.shape[1]))
                kv = torch.tensor([h // ratio for h in heads], device=tensor.device)
                m = self.plan.spec.effective_bucket_size
                ex.n_bins = -(-self.plan.max_length // m)
                exact = exact_attention(
                    tensor[0].index_select(0, torch.tensor(heads, device=tensor.device)).cpu(),
                    key[0].index_select(0, kv).cpu(),
                    keep,
                    attention=self.attention[layer],
                    bucket_size=m,
                    n_bins=ex.n_bins,
                )
                for i, head in enumerate(heads):
                    ex.exact[(layer, head)] = {c: v[i] for c, v in exact.items()}
            for i, head in enumerate(heads):
                ex.add(layer, head, kind, keep, vectors[i], sliding_window)
        self.seen.add(layer)
        self.seen_ever.add(layer)


def _require_extra() -> None:
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as exc:
        raise MissingExtraError(
            f"qkwh capture needs the optional extra ({exc.name} is not installed)", "capture"
        ) from None


def _versions() -> str:
    import torch
    import transformers

    from qkwh import __version__

    return f"qkwh {__version__} capture (transformers {transformers.__version__}, torch {torch.__version__})"


def capture(
    settings: CaptureSettings,
    out: Path | str,
    *,
    on_start: Callable[[int, int], None] | None = None,
    on_example: Callable[[int], None] | None = None,
    on_message: Callable[[str], None] | None = None,
) -> CaptureReport:
    """Capture ``settings`` into ``out`` (new, resumed, or unchanged when already complete).

    on_start(total_examples, already_done) once the documents are counted; on_example(tokens)
    after each example (also for examples done by an earlier, interrupted run);
    on_message(text) for notes.
    """
    say = on_message or (lambda _m: None)
    out = Path(out).expanduser()
    settings.check()
    _require_extra()
    settings = settings.normalised()
    state = _check_out(out, settings)
    if state == "complete":
        return CaptureReport(out, "unchanged")
    source = open_source(
        settings.texts,
        split=settings.split,
        text_column=settings.text_column,
        id_column=settings.id_column,
        subset=settings.subset,
    )
    from qkwh.capture import model as M

    say(f"loading {settings.model}")
    lm, tokenizer, info = M.load(settings.model, dtype=settings.dtype)
    pl = plan(settings, info)
    fp = _fingerprint(settings)
    record = {**_settings_json(settings), "fingerprint": fp, "plan": pl.as_dict()}
    if state == "new":
        atomic_write_bytes(
            P.work_dir(out) / P.SETTINGS,
            (json.dumps(record, indent=2, sort_keys=True) + "\n").encode(),
        )
    done = P.finished_parts(out)
    total = source.count if settings.examples is None else min(source.count, settings.examples)
    if on_start:
        on_start(total, len(done))
    collector = _Collector(pl, full_attention_only=not settings.include_sliding)
    report = CaptureReport(
        out, "resumed" if done else "captured", model_name=info.name, n_resumed=len(done)
    )
    import torch

    seen: set[int] = set()
    with M.attention_hook(lm, collector), torch.inference_mode():
        for doc in source.documents(settings.examples):
            seen.add(doc.index)
            text_hash = hashlib.sha256(doc.text.encode("utf-8")).hexdigest()
            if doc.index in done:
                if done[doc.index].text_sha256 != text_hash:
                    raise InputError(
                        f"{source.spec}: document {doc.index} changed since the interrupted run; "
                        f"remove {out} to start over"
                    )
                report.total_tokens += done[doc.index].tokens
                if on_example:
                    on_example(done[doc.index].tokens)
                continue
            enc = tokenizer(
                doc.text, truncation=True, max_length=pl.max_length, return_tensors="pt"
            )
            ids = enc["input_ids"]
            n_tokens = int(ids.shape[-1])
            ex = P.ExampleRows(
                doc.index, doc.example_id, stored_example_id(doc.example_id), n_tokens, text_hash
            )
            if n_tokens:
                collector.example, collector.seen = ex, set()
                try:
                    lm.base_model(
                        input_ids=ids, attention_mask=enc.get("attention_mask"), use_cache=False
                    )
                finally:
                    collector.example = None
                missing = set(pl.selection.layers) - collector.seen - collector.skipped_sliding
                if missing:
                    raise InputError(
                        f"{settings.model}: layers {sorted(missing)} never called attention in a "
                        "forward pass, so nothing could be captured there"
                    )
            P.write_part(out, ex, head_dim=info.head_dim, buckets_of=pl.spec.bucket_of)
            done[doc.index] = P.read_part_info(P.part_path(out, doc.index))
            report.total_tokens += n_tokens
            if on_example:
                on_example(n_tokens)
    if set(done) - seen:
        raise InputError(
            f"{source.spec}: has fewer documents than when the capture was interrupted; "
            f"remove {out} to start over"
        )
    report.n_examples = len(done)
    report.skipped_sliding_layers = sorted(
        collector.skipped_sliding | _sliding_excluded(pl, settings)
    )
    say("writing the sniffer files")
    attention = {**collector.metadata(), **config_metadata(lm.config)}
    _finish(out, settings, record, pl, info, source, done, report, attention)
    return report


def _sliding_excluded(pl: Plan, settings: CaptureSettings) -> set[int]:
    return set() if settings.include_sliding else set(pl.selection.sliding_layers)


def _finish(
    out: Path,
    settings: CaptureSettings,
    record: dict,
    pl: Plan,
    info: Any,
    source: TextSource,
    done: dict[int, P.PartInfo],
    report: CaptureReport,
    attention: dict[str, Any] | None = None,
) -> None:
    P.remove_stale_temporaries(out)
    files, buckets = P.finalise(out, done.values(), head_dim=info.head_dim)
    metadata: dict[str, Any] = {
        "attention_scope": "all_attention" if settings.include_sliding else "full_only",
        "capture_pre_rope": 0,
        "capture_token_strings": 0,
        "capture_tool": _versions(),
        "dataset_branch": "",
        "dataset_repo": "",
        **source.metadata,
        **info.metadata(),
        **pl.spec.metadata(),
        **pl.selection.metadata,
        **(attention or {}),
        "num_examples": len(done),
        "tokenizer_max_length": pl.max_length,
        "total_tokens": sum(p.tokens for p in done.values()),
    }
    write_saver_state(out, model_name=info.name, metadata=metadata, bucket_counts=buckets)
    card = render_card(
        model_name=info.name,
        metadata=metadata,
        files=files,
        bucket_counts=buckets,
        skipped_sliding_layers=report.skipped_sliding_layers,
    )
    atomic_write_bytes(out / "README.md", card.encode())
    atomic_write_bytes(
        out / SETTINGS_FILE, (json.dumps(record, indent=2, sort_keys=True) + "\n").encode()
    )
    P.remove_work_dir(out)
    report.n_files = len(files)
    report.n_rows = sum(f.rows for f in files)
