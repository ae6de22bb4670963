"""The sniffer's on-disk layout (docs/input-format.md): ``<root>/l{LL}h{HH}{q|k}/data.parquet``."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from qkwh.errors import InputError

CONFIG_RE = re.compile(r"^l(\d{2})h(\d{2})([qk])$")
DATA_FILE = "data.parquet"


@dataclass(frozen=True)
class SniffedFile:
    """One parquet file of a sniffed dataset."""

    path: Path
    config_name: str
    layer: int
    head: int  # query head for kind 'q', KV head for kind 'k'
    kind: str  # 'q' | 'k'


@dataclass(frozen=True)
class Layout:
    root: Path
    files: tuple[SniffedFile, ...]
    stray: tuple[str, ...]  # entries that look like config folders but are not usable

    def get(self, layer: int, head: int, kind: str) -> SniffedFile | None:
        for f in self.files:
            if (f.layer, f.head, f.kind) == (layer, head, kind):
                return f
        return None


def scan(root: Path) -> Layout:
    """List the config folders of a sniffed dataset.

    Raises :class:`InputError` if ``root`` is missing, not a folder, or holds no
    ``l??h??[qk]/data.parquet``.
    """
    root = Path(root)
    if not root.exists():
        raise InputError(f"{root}: no such folder")
    if not root.is_dir():
        raise InputError(f"{root}: not a folder (expected a sniffed dataset folder)")
    files: list[SniffedFile] = []
    stray: list[str] = []
    for entry in sorted(root.iterdir()):
        if not entry.is_dir():
            continue
        m = CONFIG_RE.match(entry.name)
        if not m:
            if re.match(r"^l\d+h\d+[qk]", entry.name):
                stray.append(f"{entry.name}: folder name does not match l{{LL}}h{{HH}}{{q|k}}")
            continue
        data = entry / DATA_FILE
        if not data.is_file():
            stray.append(f"{entry.name}: no {DATA_FILE} inside")
            continue
        files.append(SniffedFile(data.resolve(), entry.name, int(m.group(1)), int(m.group(2)), m.group(3)))
    if not files:
        raise InputError(
            f"{root}: not a sniffer dataset (no l{{LL}}h{{HH}}{{q|k}}/{DATA_FILE} folders inside)"
        )
    return Layout(root.resolve(), tuple(files), tuple(stray))
