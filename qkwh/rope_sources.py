"""Where a model's RoPE frequencies come from, at ingest (docs/metrics/rope.md#where-frequencies-come-from).

In this order of preference:

1. ``capture``: the rotary modules' own ``inv_freq`` recorded by ``qkwh capture`` in the
   metadata key ``rope_frequencies`` (per layer type, with attention scaling and layout);
2. ``config``: the model's own ``config.json``, from the local model folder the capture read
   (metadata ``model_source``) or the Hugging Face cache (no network), through
   :mod:`qkwh.rope_config`;
3. ``rope_theta``: the saver state's (or registry's) ``rope_theta`` with the scaling the metadata
   records (``rope_scaling`` / ``rope_parameters``, an object or a JSON string), or alone when
   the rope type is ``default`` (or not recorded), over ``head_dim * partial_rotary_factor`` dims
   (the factor when the metadata records it, else 1);
4. ``config`` downloaded from the Hub (``hf_hub_download``, cached) -- only when the dataset
   itself came from the Hub, so a local ingest never waits on the network;

otherwise nothing is stored and a ``rope_frequencies`` warning names the missing field.  The
resolved planes are rows of the catalog table ``rope_frequencies`` (docs/tables.md).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from qkwh import rope_config as RF
from qkwh.sniffed.metadata import DatasetMetadata
from qkwh.sniffed.validate import Finding

CHECK = "rope_frequencies"


@dataclass
class ResolvedRope:
    """The frequencies of every captured layer: layer -> (inv_freq or None for NoPE, attention scaling)."""

    source: str  # 'capture' | 'config' | 'rope_theta'
    where: str  # the file or field, for the finding
    layout: str
    by_layer: dict[int, tuple[np.ndarray | None, float]] = field(default_factory=dict)

    def rows(
        self, model_id: str, *, head_dim: int, bucket_size: int, context_length: int
    ) -> dict[str, list]:
        """Columns of the ``rope_frequencies`` table, one row per (layer, plane)."""
        cols: dict[str, list] = {
            k: []
            for k in (
                "model_id",
                "layer",
                "plane",
                "dim_a",
                "dim_b",
                "inv_freq",
                "wavelength",
                "band",
                "attention_scaling",
                "layout",
                "source",
            )
        }
        for layer in sorted(self.by_layer):
            freqs, scaling = self.by_layer[layer]
            for p in RF.planes(
                head_dim,
                freqs,
                bucket_size=bucket_size,
                context_length=context_length,
                layout=self.layout,
            ):
                for k, v in (
                    ("model_id", model_id),
                    ("layer", layer),
                    ("plane", p.plane),
                    ("dim_a", p.dim_a),
                    ("dim_b", p.dim_b),
                    ("inv_freq", p.inv_freq),
                    ("wavelength", p.wavelength),
                    ("band", p.band),
                    ("attention_scaling", scaling),
                    ("layout", self.layout),
                    ("source", self.source),
                ):
                    cols[k].append(v)
        return cols

    def summary(self) -> str:
        nope = sorted(layer for layer, (f, _) in self.by_layer.items() if f is None)
        widths = sorted({2 * f.size for f, _ in self.by_layer.values() if f is not None})
        return (
            f"RoPE frequencies from {self.source} ({self.where}): {len(self.by_layer)} layer(s), "
            f"rotated width {'/'.join(map(str, widths)) or 'none'}, layout {self.layout}"
            + (f", NoPE layers {', '.join(map(str, nope))}" if nope else "")
        )


class _Missing(Exception):
    """This source cannot give the frequencies; the message says why (the missing field)."""


class _Unusable(_Missing):
    """This source is present but unusable (a malformed record, a config that does not fit the
    files): skipping it is a warning even when a later source resolves the frequencies."""


def _layers_of(
    layers: Iterable[int],
    nope: set[int],
    layer_types: list[str] | None,
    by_type: dict[str, tuple[np.ndarray, float]],
    where: str,
) -> dict[int, tuple[np.ndarray | None, float]]:
    out: dict[int, tuple[np.ndarray | None, float]] = {}
    for layer in sorted(set(layers)):
        if layer in nope:
            out[layer] = (None, 1.0)
            continue
        if "all" in by_type:
            kind = "all"
        elif layer_types is None or layer >= len(layer_types):
            raise _Missing(
                f"{where}: no layer_types entry for layer {layer} (frequencies are per layer type: "
                f"{', '.join(sorted(by_type))})"
            )
        else:
            kind = layer_types[layer]
        if kind not in by_type:
            raise _Missing(f"{where}: no frequencies for layer type {kind!r} of layer {layer}")
        out[layer] = by_type[kind]
    return out


def _from_capture(value: Any, where: str, layers, nope: set[int], head_dim: int) -> ResolvedRope:
    try:
        record = json.loads(value) if isinstance(value, str) else value
        if not isinstance(record, dict) or not isinstance(record.get("by_type"), dict):
            raise TypeError("no by_type object")
        by_type = {}
        for k, v in record["by_type"].items():
            freqs = np.asarray(v["inv_freq"], dtype=np.float64)
            scaling = float(v.get("attention_scaling", 1.0))
            if freqs.ndim != 1 or not 0 < scaling < np.inf:
                raise ValueError(f"by_type[{k!r}] is not one vector with a positive scaling")
            by_type[str(k)] = (freqs, scaling)
        layer_types = record.get("layer_types")
        if layer_types is not None and not (
            isinstance(layer_types, list) and all(isinstance(t, str) for t in layer_types)
        ):
            raise TypeError("layer_types is not a list of names")
        nope = nope | {int(x) for x in record.get("nope_layers") or []}
    except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:
        raise _Unusable(f"{where} is not a capture record ({type(exc).__name__}: {exc})") from None
    layout = record.get("layout")
    if layout not in RF.LAYOUTS:
        raise _Unusable(f"{where} has no layout (half or interleaved)")
    for kind, (f, _) in by_type.items():
        if 2 * f.size > head_dim or not np.all(np.isfinite(f) & (f > 0)):
            raise _Unusable(
                f"{where}[{kind!r}]: {f.size} frequencies do not fit head_dim {head_dim} "
                "(or are not finite and positive)"
            )
    return ResolvedRope(  # the info finding names the key, as it always has
        "capture",
        "metadata rope_frequencies",
        layout,
        _layers_of(layers, nope, layer_types, by_type, where),
    )


def _from_config(
    config: dict[str, Any], where: str, layers, nope: set[int], head_dim: int
) -> ResolvedRope:
    try:
        params = RF.parameters_from_config(config, where=where)
        by_type = {kind: p.frequencies() for kind, p in params.items()}
    except RF.RopeParameterError as exc:
        raise _Unusable(str(exc)) from None
    d = next(iter(params.values())).head_dim
    if d != head_dim:
        raise _Unusable(f"{where}: head_dim {d} differs from the files' vector length {head_dim}")
    nope = nope | set(RF.nope_layers_from_config(config))
    return ResolvedRope(
        "config",
        where,
        RF.layout_from_config(config),
        _layers_of(layers, nope, RF.layer_types_from_config(config), by_type, where),
    )


def _read_config(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise _Unusable(f"{path}: unreadable ({exc})") from None
    if not isinstance(data, dict):
        raise _Unusable(f"{path}: not a JSON object")
    return data


def _cached_config(repo_id: str, revision: str | None) -> Path | None:
    """config.json of a Hub model from the Hugging Face cache, without the network."""
    try:
        from huggingface_hub import try_to_load_from_cache

        from qkwh.sniffed.hub import default_cache_dir

        found = try_to_load_from_cache(
            repo_id, "config.json", cache_dir=str(default_cache_dir()), revision=revision or None
        )
    except Exception:  # noqa: BLE001 - an invalid repo id or a broken cache: not cached
        return None
    return Path(found) if isinstance(found, str) else None


def _download_config(repo_id: str, revision: str | None) -> Path:
    from huggingface_hub import hf_hub_download

    from qkwh.sniffed.hub import default_cache_dir, endpoint, etag_timeout, offline

    if offline():
        raise _Missing(
            f"config.json of {repo_id} is not in the Hugging Face cache and HF_HUB_OFFLINE is set"
        )
    try:
        return Path(
            hf_hub_download(
                repo_id,
                "config.json",
                revision=revision or None,
                endpoint=endpoint(),
                cache_dir=str(default_cache_dir()),
                etag_timeout=etag_timeout(),
            )
        )
    except Exception as exc:  # noqa: BLE001 - any failure leaves the frequencies unresolved, never the ingest
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise _Missing(
            f"config.json of {repo_id} could not be read from {endpoint()} ({first})"
        ) from None


def _metadata_mapping(meta: DatasetMetadata, key: str) -> dict[str, Any] | None:
    """A mapping recorded in the metadata, as an object or as a JSON string (None when absent)."""
    value = meta.metadata.get(key)
    if isinstance(value, str) and value.strip().startswith("{"):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    return dict(value) if isinstance(value, dict) and value else None


def _metadata_prf(meta: DatasetMetadata) -> float | None:
    """The metadata's ``partial_rotary_factor`` (None when absent); a value that is not a number
    in (0, 1] is refused naming the file, never read as 1."""
    value = meta.metadata.get("partial_rotary_factor")
    if value is None or value == "":
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if isinstance(value, bool) or not 0 < number <= 1:
        raise _Unusable(
            f"{meta.where('partial_rotary_factor')} {value!r} is not a number in (0, 1]"
        )
    return number


def _check_rows(resolved: ResolvedRope, head_dim: int) -> ResolvedRope:
    """``resolved`` when every layer's planes can be laid out over ``head_dim`` dims."""
    for layer, (freqs, scaling) in resolved.by_layer.items():
        try:
            RF.planes(head_dim, freqs, bucket_size=1, context_length=2, layout=resolved.layout)
        except RF.RopeParameterError as exc:
            raise _Unusable(f"{resolved.where}: layer {layer}: {exc}") from None
        if not 0 < scaling < math.inf:
            raise _Unusable(f"{resolved.where}: layer {layer}: attention scaling {scaling}")
    return resolved


def resolve(
    *,
    meta: DatasetMetadata,
    layers: Iterable[int],
    head_dim: int,
    rope_theta: float | None,
    rope_type: str | None,
    nope_layers: str | None,
    hf_model: str | None,
    hf_revision: str | None = None,
    allow_download: bool = False,
) -> tuple[ResolvedRope | None, list[Finding]]:
    """The frequencies of the captured ``layers`` in the order of preference of this module, and
    its ``rope_frequencies`` findings: info with the source, plus one warning per source that was
    present but unusable and skipped (naming it and why); or one warning naming what is missing.
    Never raises on malformed RoPE facts."""
    layers = sorted(set(layers))
    tried: list[str] = []
    skipped: list[str] = []
    try:
        nope = {int(x) for x in str(nope_layers or "").replace(",", ";").split(";") if x.strip()}
    except ValueError:
        reason = f"nope_layers {nope_layers!r} of the registry is not a list of layers"
        skipped.append(reason)
        tried.append(reason)
        nope = set()

    attempts: list[tuple[str, Callable[[], ResolvedRope]]] = []
    recorded = meta.metadata.get("rope_frequencies")
    if recorded not in (None, ""):
        where = meta.where("rope_frequencies")
        attempts.append(("capture", lambda: _from_capture(recorded, where, layers, nope, head_dim)))
    source = meta.get_str("model_source")
    folder = Path(source).expanduser() if source else None
    if folder is not None and (folder / "config.json").is_file():
        attempts.append(
            (
                "folder",
                lambda: _from_config(
                    _read_config(folder / "config.json"),
                    str(folder / "config.json"),
                    layers,
                    nope,
                    head_dim,
                ),
            )
        )
    if hf_model:

        def cached() -> ResolvedRope:
            path = _cached_config(hf_model, hf_revision)
            if path is None:
                raise _Missing(f"config.json of {hf_model} is not in the Hugging Face cache")
            return _from_config(
                _read_config(path), f"{hf_model} config.json", layers, nope, head_dim
            )

        attempts.append(("cache", cached))

    def from_theta() -> ResolvedRope:
        if rope_theta is None:
            if meta.metadata.get("rope_theta") not in (None, ""):
                raise _Unusable(
                    f"{meta.where('rope_theta')} {meta.metadata['rope_theta']!r} is not a number"
                )
            raise _Missing("no rope_theta in the metadata or the registry")
        if not 0 < rope_theta < math.inf:
            raise _Unusable(
                f"{meta.where('rope_theta')} {rope_theta!r} is not a finite positive number"
            )
        prf = _metadata_prf(meta)
        scaling = _metadata_mapping(meta, "rope_parameters") or _metadata_mapping(
            meta, "rope_scaling"
        )
        if scaling:  # the scaling recorded in the metadata, read like a config.json
            cfg = {
                "head_dim": head_dim,
                "rope_theta": rope_theta,
                "rope_scaling": scaling,
                "max_position_embeddings": meta.get_int("max_position_embeddings"),
                "model_type": meta.get_str("model_type"),
            }
            if prf is not None:
                cfg["partial_rotary_factor"] = prf
            resolved = _from_config(cfg, "metadata rope_scaling", layers, nope, head_dim)
            resolved.source = "rope_theta"
            return resolved
        if rope_type not in (None, "", "default"):
            raise _Missing(
                f"rope_type {rope_type!r} needs its scaling parameters (factor, ...), which the "
                "metadata does not record"
            )
        try:
            freqs = RF.default_inv_freq(rope_theta, RF.rotary_dim(head_dim, prf or 1.0))
        except RF.RopeParameterError as exc:
            raise _Unusable(str(exc)) from None
        return ResolvedRope(
            "rope_theta",
            f"rope_theta {rope_theta:g}, default type",
            RF.layout_of_model_type(meta.get_str("model_type")),
            _layers_of(layers, nope, None, {"all": (freqs, 1.0)}, "rope_theta"),
        )

    attempts.append(("rope_theta", from_theta))
    if hf_model and allow_download:
        attempts.append(
            (
                "hub",
                lambda: _from_config(
                    _read_config(_download_config(hf_model, hf_revision)),
                    f"{hf_model} config.json",
                    layers,
                    nope,
                    head_dim,
                ),
            )
        )
    for name, attempt in attempts:
        try:
            resolved = _check_rows(attempt(), head_dim)
        except _Unusable as exc:
            tried.append(str(exc))
            skipped.append(f"{name}: {exc}")
            continue
        except _Missing as exc:
            tried.append(str(exc))
            continue
        except (RF.RopeParameterError, ValueError, TypeError, KeyError, ArithmeticError) as exc:
            reason = f"{name}: unusable RoPE facts ({type(exc).__name__}: {exc})"
            tried.append(reason)
            skipped.append(reason)
            continue
        findings = [Finding("info", None, CHECK, resolved.summary())]
        findings += [
            Finding(
                "warning",
                None,
                CHECK,
                f"RoPE source skipped, present but unusable ({why}); the frequencies come from "
                f"{resolved.source} instead",
            )
            for why in skipped
        ]
        return resolved, findings
    why = "; ".join(tried)
    return None, [
        Finding(
            "warning",
            None,
            CHECK,
            f"RoPE frequencies unknown, the rope analysis will skip this model: {why}",
        )
    ]
