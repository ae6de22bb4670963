"""Load a run configuration: ``configs/run.yaml``, an optional user file, ``--param`` overrides."""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

from qkwh.errors import InputError, did_you_mean
from qkwh.params import RunConfig
from qkwh.paths import RUN_CONFIG_YAML


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        raise InputError(f"{path}: no such run config") from None
    data = _parse_yaml(str(path), text)
    if not isinstance(data, dict):
        raise InputError(f"{path}: a run config must be a mapping")
    return copy.deepcopy(data)  # the cached parse stays as read


@functools.lru_cache(maxsize=8)
def _parse_yaml(path: str, text: str) -> Any:
    """``text`` parsed as safe YAML, with LibYAML when PyYAML has it (about ten times faster than
    the pure-Python parser, same values); a command reads the run config more than once, so the
    last few texts are kept (:func:`_read_yaml` hands out copies)."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        return yaml.load(text, Loader=loader) or {}  # a safe loader
    except yaml.YAMLError as exc:
        raise InputError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from None


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in extra.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


#: keys of a run config that say where compute runs, not what it computes: they are not
#: analysis parameters and never enter a config_id
EXECUTION_KEYS = ("executor", "ray_address")


def _load(path: Path | None) -> tuple[dict[str, Any], str]:
    data: dict[str, Any] = _read_yaml(RUN_CONFIG_YAML) if RUN_CONFIG_YAML.exists() else {}
    source = str(RUN_CONFIG_YAML)
    if path is not None:
        data = _merge(data, _read_yaml(path))
        source = str(path)
    return data, source


def load_execution(path: Path | None = None) -> dict[str, str | None]:
    """The run config's ``executor`` (pool | ray) and ``ray_address`` (None when absent)."""
    data, source = _load(path)
    out = {key: data.get(key) for key in EXECUTION_KEYS}
    for key, value in out.items():
        if value is not None and not isinstance(value, str):
            raise InputError(f"{source}: {key} must be a string, not {value!r}")
    return out


def load_run_config(path: Path | None = None, params: list[str] | None = None) -> RunConfig:
    """Defaults from ``configs/run.yaml`` (or the dataclass defaults if it is absent), then the
    user's YAML, then ``key=value`` overrides (dotted keys, e.g. ``plasticity.cov_mode=diag``)."""
    data, source = _load(path)
    data = {k: v for k, v in data.items() if k not in EXECUTION_KEYS}
    try:
        cfg = RunConfig.from_dict(data)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{source}: {_with_hint(exc)}") from None
    overrides: dict[str, str] = {}
    for item in params or []:
        if "=" not in item:
            raise InputError(f"--param {item!r}: expected key=value, e.g. plasticity.cov_mode=diag")
        key, value = item.split("=", 1)
        overrides[key.strip()] = value.strip()
    try:
        return cfg.with_overrides(overrides) if overrides else cfg
    except ValueError as exc:
        raise InputError(f"--param: {_with_hint(exc)}") from None


def _dotted_keys(data: dict[str, Any], prefix: str = "") -> list[str]:
    """Every settable key of a run config as ``-p`` spells it, e.g. ``plasticity.cov_mode``."""
    keys: list[str] = []
    for k, v in data.items():
        keys += _dotted_keys(v, f"{prefix}{k}.") if isinstance(v, dict) else [f"{prefix}{k}"]
    return keys


def _with_hint(exc: Exception) -> str:
    """The message of an unknown key or parameter, with a "did you mean" naming the closest one."""
    import re

    m = re.match(r"unknown (?:parameter|run-config key) (?:(\w+)\.)?'([^']*)'", str(exc))
    if m is None:
        return str(exc)
    section, name = m.groups()
    keys = _dotted_keys(RunConfig().to_dict())
    sections = {k.split(".")[0] for k in keys if "." in k}
    return (
        f"{exc}{did_you_mean(f'{section}.{name}' if section else name, [*keys, *sorted(sections)])}"
    )
