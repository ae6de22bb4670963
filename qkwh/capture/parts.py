"""Resumable storage of a capture in progress, and its finalisation into the sniffer layout.

While a capture runs, each finished example becomes one *part file*
``<out>/.qkwh-capture/part-{index:06d}.parquet`` (written to a temporary name and renamed): the
rows of every (layer, head, kind) for that example, one row group per config, plus the example's
facts (id, token count, text hash) in the file's metadata.  An example either has its whole part
file or none, so an interrupted capture resumes at the first example without one.

Finalising reads the part files config by config (a batch of configs at a time, within a memory
budget), writes each ``l{LL}h{HH}{q|k}/data.parquet`` atomically, then ``_saver_state.json``, the
dataset card and the capture settings, and removes the work folder.  Memory is bounded by one
example's rows while capturing and by the budget (at least one whole config) while finalising.
"""

from __future__ import annotations

import json
import shutil
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from qkwh.sniffed.writer import atomic_write_bytes, config_name, data_path, write_vectors_file

WORK_DIR = ".qkwh-capture"
SETTINGS = "settings.json"
_META_KEY = b"qkwh_capture_part"


@dataclass
class ExampleRows:
    """Rows of one example, per (layer, head, kind): positions and (K, d) float32 vectors."""

    index: int
    example_id: int  # normalised int64 id (seeds); stored as its int32 wrap-around
    stored_id: int
    tokens: int
    text_sha256: str
    rows: dict[tuple[int, int, str], tuple[np.ndarray, np.ndarray, int | None]] = field(
        default_factory=dict
    )
    # (layer, head) -> the exact attention of its kept q rows (qkwh.capture.exact)
    exact: dict[tuple[int, int], dict[str, np.ndarray]] = field(default_factory=dict)
    n_bins: int = 0  # distance bins of ``exact``

    def add(
        self,
        layer: int,
        head: int,
        kind: str,
        position: np.ndarray,
        vectors: np.ndarray,
        sliding_window: int | None,
    ) -> None:
        key = (int(layer), int(head), kind)
        if key in self.rows:
            raise RuntimeError(
                f"{config_name(*key)} captured twice for example {self.index}: the model "
                "calls attention more than once per layer"
            )
        self.rows[key] = (
            np.asarray(position, dtype=np.int64),
            np.asarray(vectors, dtype=np.float32),
            sliding_window,
        )


@dataclass(frozen=True)
class PartInfo:
    """Facts of one finished example, read back from its part file's metadata."""

    path: Path
    index: int
    example_id: int
    tokens: int
    text_sha256: str
    configs: tuple[str, ...]  # row group i holds configs[i]
    rows: tuple[int, ...]


def work_dir(out: Path) -> Path:
    return Path(out) / WORK_DIR


def part_path(out: Path, index: int) -> Path:
    return work_dir(out) / f"part-{int(index):06d}.parquet"


def write_part(
    out: Path, ex: ExampleRows, *, head_dim: int, buckets_of: Callable[[np.ndarray], np.ndarray]
) -> Path:
    """Write one example's part file atomically; ``buckets_of(positions) -> bucket ids``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    keys = sorted(ex.rows, key=lambda k: (k[0], k[2], k[1]))
    info = {
        "index": ex.index,
        "example_id": ex.example_id,
        "tokens": ex.tokens,
        "text_sha256": ex.text_sha256,
        "configs": [config_name(*k) for k in keys],
        "rows": [int(ex.rows[k][0].size) for k in keys],
    }
    from qkwh.capture import exact

    fields = [
        ("bucket", pa.int32()),
        ("example_id", pa.int32()),
        ("position", pa.int32()),
        ("vector", pa.list_(pa.float32(), int(head_dim))),
        ("sliding_window", pa.int32()),
    ]
    schema = pa.schema(fields + (exact.schema_fields() if ex.exact else [])).with_metadata(
        {_META_KEY: json.dumps(info).encode()}
    )
    sink = pa.BufferOutputStream()
    with pq.ParquetWriter(sink, schema, compression="zstd", use_dictionary=False) as writer:
        for key in keys:
            pos, vec, window = ex.rows[key]
            n = pos.size
            table = pa.table(
                {
                    "bucket": pa.array(buckets_of(pos).astype(np.int32)),
                    "example_id": pa.array(np.full(n, ex.stored_id, dtype=np.int32)),
                    "position": pa.array(pos.astype(np.int32)),
                    "vector": pa.FixedSizeListArray.from_arrays(
                        pa.array(vec.reshape(-1)), int(head_dim)
                    ),
                    "sliding_window": pa.array(
                        np.full(n, window if window is not None else 0, dtype=np.int32),
                        mask=np.full(n, window is None),
                    ),
                    **(
                        exact.arrow_columns(ex.exact.get((key[0], key[1])), n, ex.n_bins)
                        if ex.exact and key[2] == "q"
                        else (exact.arrow_columns(None, n, 0) if ex.exact else {})
                    ),
                },
                schema=schema,
            )
            writer.write_table(table, row_group_size=max(n, 1))
    path = part_path(out, ex.index)
    atomic_write_bytes(path, sink.getvalue().to_pybytes())
    return path


def read_part_info(path: Path) -> PartInfo:
    import pyarrow.parquet as pq

    meta = pq.read_schema(path).metadata or {}
    info = json.loads(meta[_META_KEY])
    return PartInfo(
        Path(path),
        int(info["index"]),
        int(info["example_id"]),
        int(info["tokens"]),
        str(info["text_sha256"]),
        tuple(info["configs"]),
        tuple(int(r) for r in info["rows"]),
    )


def finished_parts(out: Path) -> dict[int, PartInfo]:
    """Finished examples by index (temporary files of an interrupted write are removed)."""
    wd = work_dir(out)
    if not wd.is_dir():
        return {}
    for tmp in wd.glob(".*.tmp-*"):
        tmp.unlink()
    parts = {}
    for p in sorted(wd.glob("part-*.parquet")):
        info = read_part_info(p)
        parts[info.index] = info
    return parts


@dataclass(frozen=True)
class FinalFile:
    layer: int
    head: int
    kind: str
    rows: int
    sliding_window: int | None


def finalise(
    out: Path, parts: Iterable[PartInfo], *, head_dim: int, memory_budget: int = 256 * 2**20
) -> tuple[list[FinalFile], dict[int, int]]:
    """Write every config file from the part files; return the files and the bucket counts.

    Configs are assembled in batches whose rows fit ``memory_budget`` bytes (a config larger than
    the budget is assembled alone).  Rows keep example order, positions ascending.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    parts = sorted(parts, key=lambda p: p.index)
    where: dict[str, list[tuple[int, int]]] = defaultdict(list)  # config -> [(part #, row group)]
    total: dict[str, int] = defaultdict(int)
    for i, part in enumerate(parts):
        for group, (name, n) in enumerate(zip(part.configs, part.rows)):
            if n:
                where[name].append((i, group))
                total[name] += n
    row_bytes = 4 * head_dim + 16
    batches: list[list[str]] = [[]]
    used = 0
    for name in sorted(where):
        size = total[name] * row_bytes
        if batches[-1] and used + size > memory_budget:
            batches.append([])
            used = 0
        batches[-1].append(name)
        used += size

    files: list[FinalFile] = []
    buckets: dict[int, int] = defaultdict(int)
    for batch in batches:
        wanted: dict[int, list[tuple[str, int]]] = defaultdict(list)
        for name in batch:
            for i, group in where[name]:
                wanted[i].append((name, group))
        pieces: dict[str, list[pa.Table]] = defaultdict(list)
        for i in sorted(wanted):
            pf = pq.ParquetFile(parts[i].path)
            for name, group in wanted[i]:
                pieces[name].append(pf.read_row_group(group))
        for name in batch:
            table = pa.concat_tables(pieces.pop(name))
            layer, head, kind = int(name[1:3]), int(name[4:6]), name[6]
            windows = set(table.column("sliding_window").to_pylist())
            if len(windows) != 1:
                raise RuntimeError(
                    f"{name}: inconsistent sliding windows {sorted(windows, key=str)} across examples"
                )
            window = windows.pop()
            bucket = table.column("bucket").to_numpy()
            vec = table.column("vector").combine_chunks().values.to_numpy().reshape(-1, head_dim)
            extra = None
            if (
                "attn_distance" in table.column_names
                and table.column("attn_distance").null_count < table.num_rows
            ):
                extra = {
                    c: table.column(c).combine_chunks()
                    for c in ("attn_bins", "attn_distance", "attn_entropy", "attn_sink")
                }
            write_vectors_file(
                data_path(out, layer, head, kind),
                position=table.column("position").to_numpy(),
                example_id=table.column("example_id").to_numpy(),
                bucket=bucket,
                vectors=vec,
                sliding_window=window,
                extra=extra,
            )
            ids, counts = np.unique(bucket, return_counts=True)
            for b, c in zip(ids.tolist(), counts.tolist()):
                buckets[int(b)] += int(c)
            files.append(FinalFile(layer, head, kind, table.num_rows, window))
    return files, dict(sorted(buckets.items()))


def remove_stale_temporaries(out: Path) -> None:
    """Delete temporary files a killed finalisation left beside the final files."""
    for pattern in (".*.tmp-*", "l??h??[qk]/.*.tmp-*"):
        for tmp in Path(out).glob(pattern):
            tmp.unlink()


def remove_work_dir(out: Path) -> None:
    shutil.rmtree(work_dir(out), ignore_errors=True)
