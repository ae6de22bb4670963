"""Text sources of a capture: one document per example.

* plain text: one or more ``.txt``/``.md`` files, or folders of them (sorted by path); the example
  id is the document's index;
* a JSONL file: one JSON object per line with a text field and optionally an id field;
* a parquet file with a text column and optionally an id column;
* a Hugging Face dataset ``hf://datasets/OWNER/NAME[@REVISION]`` (through the ``datasets``
  library and its cache, so ``HF_HUB_OFFLINE=1`` works once the dataset is cached), with a
  split, a text column and an optional id column, like the public corpus protocol.

Documents are read lazily, one at a time.  Ids follow :func:`~qkwh.capture.sampling.normalize_example_id`;
without an id column the row index is the id.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qkwh.capture.sampling import normalize_example_id
from qkwh.errors import InputError, MissingExtraError

HUB_PREFIX = "hf://datasets/"
TEXT_SUFFIXES = (".txt", ".md", ".text", ".rst")


@dataclass(frozen=True)
class Document:
    """One example: its position in the source, its normalised int64 id and its text."""

    index: int
    example_id: int
    text: str


@dataclass(frozen=True)
class TextSource:
    """A resolved source: how many documents it holds and how to read them.

    ``metadata`` holds the ``source_dataset`` / ``dataset_name`` / ``dataset_split`` keys.
    """

    spec: str
    kind: str  # 'text' | 'jsonl' | 'parquet' | 'hub'
    count: int
    metadata: dict[str, str]
    _reader: Any

    def documents(self, limit: int | None = None) -> Iterator[Document]:
        n = self.count if limit is None else min(self.count, int(limit))
        for index, (raw_id, text) in enumerate(self._reader()):
            if index >= n:
                return
            if not isinstance(text, str):
                raise InputError(
                    f"{self.spec}: document {index} has a non-text value ({type(text).__name__})"
                )
            yield Document(index, normalize_example_id(index if raw_id is None else raw_id), text)


def open_source(
    specs: Sequence[str],
    *,
    split: str = "train",
    text_column: str = "text",
    id_column: str | None = None,
    subset: str | None = None,
) -> TextSource:
    """Resolve ``--texts`` values into a :class:`TextSource`.

    Raises :class:`InputError` (naming the path) on a missing path, an unknown file type, a
    source without documents or a missing text column.
    """
    specs = [str(s) for s in specs]
    if not specs:
        raise InputError(
            "--texts: name at least one text file, folder, JSONL/parquet file or hf://datasets/ source"
        )
    if len(specs) == 1 and specs[0].startswith(HUB_PREFIX):
        return _hub_source(
            specs[0], split=split, text_column=text_column, id_column=id_column, subset=subset
        )
    if any(s.startswith(HUB_PREFIX) for s in specs):
        raise InputError("--texts: a hf://datasets/ source cannot be combined with other sources")
    if len(specs) == 1 and specs[0].endswith(".jsonl"):
        return _jsonl_source(Path(specs[0]), text_column=text_column, id_column=id_column)
    if len(specs) == 1 and specs[0].endswith(".parquet"):
        return _parquet_source(Path(specs[0]), text_column=text_column, id_column=id_column)
    return _text_files_source(specs)


def _empty(spec: str) -> InputError:
    return InputError(f"{spec}: no documents to capture")


def _text_files_source(specs: Sequence[str]) -> TextSource:
    files: list[Path] = []
    for spec in specs:
        p = Path(spec).expanduser()
        if not p.exists():
            raise InputError(f"{p}: no such file or folder")
        if p.is_dir():
            found = sorted(
                f for f in p.rglob("*") if f.is_file() and f.suffix.lower() in TEXT_SUFFIXES
            )
            if not found:
                raise InputError(f"{p}: no text files ({', '.join(TEXT_SUFFIXES)}) inside")
            files += found
        elif p.suffix.lower() in (".jsonl", ".parquet"):
            raise InputError(f"{p}: a {p.suffix} source must be given alone")
        else:
            files.append(p)
    label = specs[0] if len(specs) == 1 else f"{len(files)} text files"

    def read() -> Iterator[tuple[Any, str]]:
        for f in files:
            try:
                yield None, f.read_text(encoding="utf-8")
            except UnicodeDecodeError as exc:
                raise InputError(
                    f"{f}: not UTF-8 text ({exc.reason} at byte {exc.start})"
                ) from None

    if not files:
        raise _empty(label)
    return TextSource(
        label,
        "text",
        len(files),
        {"source_dataset": label, "dataset_name": "", "dataset_split": "files"},
        read,
    )


def _jsonl_source(path: Path, *, text_column: str, id_column: str | None) -> TextSource:
    path = path.expanduser()
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    lines = 0
    with path.open(encoding="utf-8") as fh:
        for number, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(f"{path}: line {number} is not valid JSON ({exc.msg})") from None
            if not isinstance(row, dict) or text_column not in row:
                raise InputError(f"{path}: line {number} has no {text_column!r} field")
            if id_column and id_column not in row:
                raise InputError(f"{path}: line {number} has no {id_column!r} field")
            lines += 1
    if not lines:
        raise _empty(str(path))
    use_id = id_column or "id"

    def read() -> Iterator[tuple[Any, str]]:
        with path.open(encoding="utf-8") as fh:
            for line in fh:
                if line.strip():
                    row = json.loads(line)
                    yield row.get(use_id), row[text_column]

    return TextSource(
        str(path),
        "jsonl",
        lines,
        {"source_dataset": path.name, "dataset_name": "", "dataset_split": "jsonl"},
        read,
    )


def _parquet_source(path: Path, *, text_column: str, id_column: str | None) -> TextSource:
    import pyarrow.parquet as pq

    path = path.expanduser()
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    try:
        pf = pq.ParquetFile(path)
    except Exception as exc:  # pyarrow raises several types for unreadable files
        raise InputError(
            f"{path}: not a readable parquet file ({str(exc).splitlines()[0]})"
        ) from None
    names = pf.schema_arrow.names
    if text_column not in names:
        raise InputError(f"{path}: no column {text_column!r} (have {', '.join(names)})")
    if id_column and id_column not in names:
        raise InputError(f"{path}: no column {id_column!r} (have {', '.join(names)})")
    use_id = id_column or ("id" if "id" in names else None)
    if pf.metadata.num_rows == 0:
        raise _empty(str(path))

    def read() -> Iterator[tuple[Any, str]]:
        cols = [text_column] + ([use_id] if use_id else [])
        for batch in pq.ParquetFile(path).iter_batches(batch_size=64, columns=cols):
            texts = batch.column(text_column).to_pylist()
            ids = batch.column(use_id).to_pylist() if use_id else [None] * len(texts)
            yield from zip(ids, texts)

    return TextSource(
        str(path),
        "parquet",
        pf.metadata.num_rows,
        {"source_dataset": path.name, "dataset_name": "", "dataset_split": "parquet"},
        read,
    )


def _hub_source(
    spec: str, *, split: str, text_column: str, id_column: str | None, subset: str | None
) -> TextSource:
    name, _, revision = spec[len(HUB_PREFIX) :].partition("@")
    if name.count("/") != 1 or not all(name.split("/")):
        raise InputError(f"{spec}: expected hf://datasets/OWNER/NAME[@REVISION]")
    try:
        import datasets
    except ImportError:
        raise MissingExtraError(
            f"{spec}: reading a Hub dataset needs the datasets library", "capture"
        ) from None
    try:
        ds = datasets.load_dataset(name, subset, split=split, revision=revision or None)
    except Exception as exc:  # network, cache and schema errors all end here
        raise InputError(
            f"{spec}: cannot load split {split!r} ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})"
        ) from None
    columns = list(getattr(ds, "column_names", []) or [])
    if text_column not in columns:
        raise InputError(f"{spec}: no column {text_column!r} (have {', '.join(columns)})")
    if id_column and id_column not in columns:
        raise InputError(f"{spec}: no column {id_column!r} (have {', '.join(columns)})")
    use_id = id_column or ("id" if "id" in columns else None)
    if len(ds) == 0:
        raise _empty(spec)

    def read() -> Iterator[tuple[Any, str]]:
        for row in ds:
            yield (row[use_id] if use_id else None), row[text_column]

    return TextSource(
        spec,
        "hub",
        len(ds),
        {"source_dataset": name, "dataset_name": subset or "", "dataset_split": split},
        read,
    )
