"""Dataset metadata: ``_saver_state.json`` and the dataset card ``README.md`` (docs/input-format.md#metadata)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qkwh.errors import InputError

_CARD_LINE = re.compile(r"^\s*-\s*`([A-Za-z0-9_]+)`\s*:\s*`([^`]*)`\s*$")


@dataclass(frozen=True)
class DatasetMetadata:
    model_name: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)  # flat model_metadata
    bucket_counts: dict[int, int] = field(default_factory=dict)
    sources: tuple[str, ...] = ()  # which files were read
    origins: dict[str, str] = field(default_factory=dict)  # key -> the file its value came from

    def where(self, key: str) -> str:
        """``FILE key``: where a metadata value was read (for messages)."""
        origin = self.origins.get(key)
        return f"{origin} {key}" if origin else f"metadata {key}"

    def get_int(self, *keys: str) -> int | None:
        for key in keys:
            value = self.metadata.get(key)
            if value in (None, ""):
                continue
            try:
                return int(float(value))  # type: ignore[arg-type]  # None skipped above
            except (TypeError, ValueError):
                continue
        return None

    def sampling_strategy(self) -> str:
        """The capture sampler: ``uniform`` (the default), ``log_uniform`` or ``all``.

        qk-sniffer's own log sampler records itself as ``log``; it is the same rule.
        """
        value = (self.get_str("sampling_strategy") or "uniform").strip().lower()
        return {"log": "log_uniform", "loguniform": "log_uniform"}.get(value, value)

    def get_str(self, *keys: str) -> str | None:
        for key in keys:
            value = self.metadata.get(key)
            if value not in (None, ""):
                return str(value)
        return None


def read_metadata(root: Path) -> DatasetMetadata:
    """Read ``_saver_state.json`` (preferred) and fill gaps from the dataset card.

    A malformed ``_saver_state.json`` is an :class:`InputError` naming the file.
    """
    root = Path(root)
    card, state = root / "README.md", root / "_saver_state.json"
    state_text = None
    if state.is_file():
        try:
            state_text = state.read_text()
        except UnicodeDecodeError as exc:
            raise InputError(f"{state}: not valid JSON ({exc})") from None
    return metadata_from_texts(
        card=(str(card), card.read_text(errors="replace")) if card.is_file() else None,
        state=(str(state), state_text) if state_text is not None else None,
    )


def metadata_from_texts(
    *, card: tuple[str, str] | None, state: tuple[str, str] | None
) -> DatasetMetadata:
    """:func:`read_metadata` from the texts of the card and the saver state, as (name, text)."""
    meta: dict[str, Any] = {}
    origins: dict[str, str] = {}
    model_name = None
    buckets: dict[int, int] = {}
    sources: list[str] = []
    if card is not None:
        card_meta = parse_card(card[1])
        if card_meta:
            meta.update(card_meta)
            origins.update(dict.fromkeys(card_meta, card[0]))
            model_name = card_meta.get("model")
            sources.append(card[0])
    if state is not None:
        name, text = state
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(f"{name}: not valid JSON ({exc})") from None
        if not isinstance(data, dict):
            raise InputError(f"{name}: expected a JSON object")
        mm = data.get("model_metadata") or {}
        if not isinstance(mm, dict):
            raise InputError(f"{name}: model_metadata is not an object")
        meta.update(mm)
        origins.update(dict.fromkeys(mm, name))
        model_name = data.get("model_name") or model_name
        for k, v in (data.get("bucket_counts") or {}).items():
            try:
                buckets[int(k)] = int(v)
            except (TypeError, ValueError):
                raise InputError(
                    f"{name}: bucket_counts has a non-integer entry {k!r}: {v!r}"
                ) from None
        sources.append(name)
    return DatasetMetadata(model_name, meta, buckets, tuple(sources), origins)


def parse_card(text: str) -> dict[str, str]:
    """The ``- `key`: `value``` lines of a qk-sniffer dataset card."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        m = _CARD_LINE.match(line)
        if m:
            out[m.group(1)] = m.group(2)
    return out
