"""The sniffer's on-disk layout (docs/input-format.md): ``<root>/l{LL}h{HH}{q|k}/data.parquet``.

A root is a local folder or, for a branch read in place on the Hub, an ``hf://`` URI (then every
path is a URI string, never a :class:`~pathlib.Path`, which would fold its ``//``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from qkwh.errors import InputError, NotFoundError

CONFIG_RE = re.compile(r"^l(\d{2})h(\d{2})([qk])$")
DATA_FILE = "data.parquet"


@dataclass(frozen=True)
class SniffedFile:
    """One parquet file of a sniffed dataset."""

    path: Path | str  # a local path, or an hf:// URI
    config_name: str
    layer: int
    head: int  # query head for kind 'q', KV head for kind 'k'
    kind: str  # 'q' | 'k'


@dataclass(frozen=True)
class Layout:
    root: Path | str
    files: tuple[SniffedFile, ...]
    stray: tuple[str, ...]  # entries that look like config folders but are not usable

    def get(self, layer: int, head: int, kind: str) -> SniffedFile | None:
        for f in self.files:
            if (f.layer, f.head, f.kind) == (layer, head, kind):
                return f
        return None


def scan(root: Path) -> Layout:
    """List the config folders of a sniffed dataset.

    Raises :class:`NotFoundError` if ``root`` is missing, :class:`InputError` if it is not a
    folder or holds no ``l??h??[qk]/data.parquet``.
    """
    root = Path(root)
    if not root.exists():
        raise NotFoundError(f"{root}: no such folder")
    if not root.is_dir():
        raise InputError(f"{root}: not a folder (expected a sniffed dataset folder)")
    folders = (
        (e.name, (e / DATA_FILE).resolve() if (e / DATA_FILE).is_file() else None)
        for e in root.iterdir()
        if e.is_dir()
    )
    return from_folders(root.resolve(), folders)


def from_folders(root: Path | str, folders: Iterable[tuple[str, Path | str | None]]) -> Layout:
    """The layout of ``root`` given its sub-folders as (name, path of its data.parquet or None).

    Raises :class:`InputError` when no folder is a usable ``l??h??[qk]`` one.
    """
    files: list[SniffedFile] = []
    stray: list[str] = []
    for name, data in sorted(folders, key=lambda item: item[0]):
        m = CONFIG_RE.match(name)
        if not m:
            if re.match(r"^l\d+h\d+[qk]", name):
                stray.append(f"{name}: folder name does not match l{{LL}}h{{HH}}{{q|k}}")
            continue
        if data is None:
            stray.append(f"{name}: no {DATA_FILE} inside")
            continue
        files.append(SniffedFile(data, name, int(m.group(1)), int(m.group(2)), m.group(3)))
    if not files:
        raise InputError(
            f"{root}: not a sniffer dataset (no l{{LL}}h{{HH}}{{q|k}}/{DATA_FILE} folders inside)"
        )
    return Layout(root, tuple(files), tuple(stray))
