"""Data-quality checks of a sniffed dataset (docs/input-format.md#what-ingest-checks).

:func:`scan_files` reads every file once (in a thread pool; pyarrow and hashlib release the GIL)
and keeps per-file statistics, never the vectors.  :func:`check_dataset` then applies the checks
that need the model's facts (bucket size, context length, head counts).  Fatal defects raise
:class:`InputError` with one line naming the file and the problem; defects that leave the data
usable become :class:`Finding` rows for ``ingest_findings``.
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from qkwh.errors import InputError
from qkwh.sniffed.layout import Layout, SniffedFile
from qkwh.sniffed.reader import FileData, read_file


@dataclass(frozen=True)
class Finding:
    severity: str  # info | warning | error
    file: str | None
    check: str
    detail: str


@dataclass(frozen=True)
class FileStats:
    """What ingest keeps of one file (no vectors)."""

    file: SniffedFile
    rows: int
    d: int
    bytes: int
    fingerprint: str
    n_examples: int
    min_position: int | None
    max_position: int | None
    max_bucket: int | None
    has_pos0: bool
    sliding_window_values: tuple[int | None, ...]
    vector_type: str
    position: np.ndarray  # int32, for checks needing the bucket size
    bucket: np.ndarray  # int32
    example_id: np.ndarray  # int32
    n_nonfinite: int
    n_zero_vectors: int | None = (
        None  # rows whose vector is all zeros; None: vectors not read (remote)
    )
    identical_vectors: bool | None = None  # 2+ rows, all the same vector; None: vectors not read

    @property
    def sliding_window(self) -> int | None:
        vals = [v for v in self.sliding_window_values if v is not None]
        return int(vals[0]) if vals else None


def fingerprint(content: bytes) -> str:
    """sha256 of a file's content, first 32 hex characters."""
    return hashlib.sha256(content).hexdigest()[:32]


def _stats(f: SniffedFile) -> FileStats:
    content = Path(f.path).read_bytes()  # one read: hashed, then decoded from memory
    data = read_file(f.path, content=content)
    v = data.vectors
    nonfinite = int(v.size - np.isfinite(v).sum()) if v.size else 0
    n_zero = int(v.shape[0] - np.count_nonzero(v.any(axis=1))) if v.size else 0
    # vectorized passes over the array already in memory; the full comparison only when the
    # first two rows agree
    identical = bool(v.shape[0] > 1 and np.array_equal(v[0], v[1]) and (v == v[0]).all())
    return stats_of(
        f,
        data,
        size=len(content),
        fingerprint=fingerprint(content),
        n_nonfinite=nonfinite,
        n_zero_vectors=n_zero,
        identical_vectors=identical,
    )


def stats_of(
    f: SniffedFile,
    data: FileData,
    *,
    size: int,
    fingerprint: str,
    n_nonfinite: int,
    d: int | None = None,
    n_zero_vectors: int | None = None,
    identical_vectors: bool | None = None,
) -> FileStats:
    """What ingest keeps of a file read by :func:`read_file` (``d`` when its vectors were not read;
    ``n_zero_vectors`` and ``identical_vectors`` None then: not checked)."""
    pos = data.position
    return FileStats(
        file=f,
        rows=data.rows,
        d=data.d if d is None else d,
        bytes=size,
        fingerprint=fingerprint,
        n_examples=int(np.unique(data.example_id).size),
        min_position=int(pos.min()) if pos.size else None,
        max_position=int(pos.max()) if pos.size else None,
        max_bucket=int(data.bucket.max()) if pos.size else None,
        has_pos0=bool((pos == 0).any()),
        sliding_window_values=data.sliding_window_values,
        vector_type=data.vector_type,
        position=pos.astype(np.int32),
        bucket=data.bucket.astype(np.int32),
        example_id=data.example_id.astype(np.int32),
        n_nonfinite=n_nonfinite,
        n_zero_vectors=n_zero_vectors,
        identical_vectors=identical_vectors,
    )


def scan_files(
    layout: Layout,
    *,
    workers: int | None = None,
    stats: Callable[[SniffedFile], FileStats] = _stats,
) -> list[FileStats]:
    """Read every file of ``layout`` with ``stats``; raise :class:`InputError` on the first unusable one."""
    workers = workers or max(1, min(4, os.cpu_count() or 1))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = list(pool.map(stats, layout.files))
    for s in results:
        if s.n_nonfinite:
            raise InputError(f"{s.file.path}: {s.n_nonfinite} NaN/Inf value(s) in column vector")
    return results


def expected_bucket(position: np.ndarray, bucket_size: int, strategy: str) -> np.ndarray:
    """Bucket ids the sniffer's sampler assigns (docs/input-format.md#buckets-and-samplers)."""
    if strategy == "log_uniform":
        p = 0 if bucket_size <= 1 else math.ceil(math.log2(bucket_size))
        return np.maximum(p, np.floor(np.log2(position.astype(np.float64) + 1.0)).astype(np.int64))
    return position.astype(np.int64) // int(bucket_size)


def duplicate_keys(
    example_id: np.ndarray, position: np.ndarray
) -> tuple[int, tuple[int, int] | None]:
    """Rows of a file that repeat an (example_id, position) key of an earlier row, and the smallest
    repeated key (None when there is none).  Positions must be >= 0.  Vectorized: one pass when
    the rows are in key order (as the sniffer writes them), else one sort."""
    key = example_id.astype(np.int64) * (1 << 32) + position.astype(np.int64)
    if key.size < 2 or bool((key[1:] > key[:-1]).all()):
        return 0, None
    key = np.sort(key)
    dup = key[1:] == key[:-1]
    n = int(dup.sum())
    if not n:
        return 0, None
    first = int(key[1:][dup][0])
    return n, (first >> 32, first & 0xFFFFFFFF)


def infer_bucket_size(stats: list[FileStats]) -> int | None:
    """The uniform bucket size implied by the data, if one fits every row."""
    pos = np.concatenate([s.position for s in stats]).astype(np.int64)
    bkt = np.concatenate([s.bucket for s in stats]).astype(np.int64)
    sel = bkt > 0
    if not sel.any():
        return None
    # position // m == b  <=>  b*m <= position < (b+1)*m
    hi = np.min((pos[sel]) // bkt[sel])  # m <= position / b
    lo = np.max(pos // (bkt + 1)) + 1  # m > position / (b+1)
    if lo <= hi:
        return int(hi)  # any m in [lo, hi] fits; the largest is the sniffer's round number
    return None


def check_dataset(
    stats: list[FileStats],
    *,
    layout: Layout,
    bucket_size: int,
    strategy: str,
    context_length: int,
    gqa_ratio: int,
) -> list[Finding]:
    """The checks that need the model's facts.  Fatal ones raise InputError."""
    findings: list[Finding] = []
    for stray in layout.stray:
        findings.append(Finding("warning", str(layout.root), "layout", f"ignored {stray}"))
    ds = sorted({s.d for s in stats})
    by_key = {(s.file.layer, s.file.head, s.file.kind): s for s in stats}

    # vector length: q file vs its k file, then model-wide
    for s in stats:
        if s.file.kind != "q":
            continue
        k = by_key.get((s.file.layer, s.file.head // gqa_ratio, "k"))
        if k is not None and k.d != s.d:
            raise InputError(
                f"{s.file.path}: vector length {s.d} differs from its k file {k.file.path} ({k.d})"
            )
    if len(ds) > 1:
        first = {d: next(s for s in stats if s.d == d) for d in ds}
        detail = ", ".join(f"{d} in {first[d].file.path}" for d in ds)
        raise InputError(f"{layout.root}: vector length differs across files ({detail})")

    for s in stats:
        path = str(s.file.path)
        if s.rows == 0:
            findings.append(Finding("warning", path, "row_count", "file has no rows"))
            continue
        exp = expected_bucket(s.position, bucket_size, strategy)
        bad = np.flatnonzero(exp != s.bucket)
        if bad.size:
            i = int(bad[0])
            raise InputError(
                f"{path}: {bad.size} row(s) have bucket ids inconsistent with positions for "
                f"{strategy} buckets of {bucket_size} tokens (first: position {int(s.position[i])} "
                f"has bucket {int(s.bucket[i])}, expected {int(exp[i])})"
            )
        if int((s.position < 0).sum()):
            raise InputError(
                f"{path}: {int((s.position < 0).sum())} row(s) have a negative position"
            )
        n_dup, key = duplicate_keys(s.example_id, s.position)
        if n_dup and key is not None:
            raise InputError(
                f"{path}: {n_dup} row(s) repeat the (example_id, position) of another row (e.g. example_id "
                f"{key[0]}, position {key[1]}); a file holds one row per token"
            )
        if s.identical_vectors:
            what = "all zero" if s.n_zero_vectors == s.rows else "the same vector"
            raise InputError(
                f"{path}: all {s.rows} vectors are {what}; the analyses need vectors that vary "
                f"(a capture that recorded nothing?)"
            )
        if s.n_zero_vectors:
            findings.append(
                Finding(
                    "warning",
                    path,
                    "zero_vectors",
                    f"{s.n_zero_vectors} of {s.rows} row(s) have an all-zero vector",
                )
            )
        real_sw = [v for v in s.sliding_window_values if v is not None]
        if len(s.sliding_window_values) > 1:
            findings.append(
                Finding(
                    "warning",
                    path,
                    "sliding_window",
                    f"{len(s.sliding_window_values)} distinct sliding_window values "
                    f"{list(s.sliding_window_values)}; the first non-null one is used",
                )
            )
        elif real_sw:
            findings.append(
                Finding("info", path, "sliding_window", f"sliding window of {real_sw[0]} tokens")
            )

    # positions the analyses cannot place: relative positions are measured against the context
    # length, so a row at or beyond it would give a bucket past the end of the context
    beyond = [
        s
        for s in stats
        if s.rows and s.max_position is not None and s.max_position >= context_length
    ]
    if beyond:
        s = beyond[0]
        more = f"; {len(beyond) - 1} other file(s) too" if len(beyond) > 1 else ""
        raise InputError(
            f"{s.file.path}: {int((s.position >= context_length).sum())} row(s) at position >= the "
            f"context length {context_length} (largest position {s.max_position}{more}); the analyses "
            f"measure positions against the context length: correct it (configs/models.csv or the "
            f"metadata's tokenizer_max_length) or drop those rows"
        )

    # GQA pairing
    for s in stats:
        if s.file.kind == "q" and (s.file.layer, s.file.head // gqa_ratio, "k") not in by_key:
            kname = f"l{s.file.layer:02d}h{s.file.head // gqa_ratio:02d}k"
            findings.append(
                Finding(
                    "warning",
                    str(s.file.path),
                    "missing_k_file",
                    f"mapped k file {kname}/data.parquet is missing; the head cannot be analysed",
                )
            )
    q_targets = {(s.file.layer, s.file.head // gqa_ratio) for s in stats if s.file.kind == "q"}
    for s in stats:
        if s.file.kind == "k" and (s.file.layer, s.file.head) not in q_targets:
            findings.append(
                Finding(
                    "info", str(s.file.path), "unused_k_file", "no q file maps to this key head"
                )
            )

    # dataset-level statistics
    ex = [s.n_examples for s in stats if s.rows]
    if ex:
        findings.append(
            Finding(
                "info",
                None,
                "examples_per_file",
                f"distinct examples per file: {min(ex)}..{max(ex)}",
            )
        )
        rows = [s.rows for s in stats]
        findings.append(
            Finding("info", None, "rows_per_file", f"rows per file: {min(rows)}..{max(rows)}")
        )
        all_pos = np.concatenate([s.position for s in stats]).astype(np.int64)
        all_ex = np.concatenate([s.example_id for s in stats]).astype(np.int64)
        uniq, inv = np.unique(all_ex, return_inverse=True)
        max_per_ex = np.full(uniq.size, -1, dtype=np.int64)
        np.maximum.at(max_per_ex, inv, all_pos)
        short = int((max_per_ex < context_length - bucket_size).sum())
        if short:
            findings.append(
                Finding(
                    "info",
                    None,
                    "short_examples",
                    f"{short} of {uniq.size} examples end before the last bucket "
                    f"(shortest ends at position {int(max_per_ex.min())}; "
                    f"context length {context_length})",
                )
            )
        pos0 = sum(1 for s in stats if s.has_pos0)
        if pos0:
            findings.append(
                Finding(
                    "info",
                    None,
                    "has_pos0",
                    f"{pos0} file(s) hold position-0 (BOS) rows; kept (norm outliers)",
                )
            )
    return findings
