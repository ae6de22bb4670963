"""Typed, frozen parameters of the per-head analyses (spec §2, defaults of §2.3.9).

One :class:`RunConfig` travels from the YAML run config (``configs/run.yaml``) through the
compute layer into the pure analyses.  Its :meth:`RunConfig.fingerprint` (together with the code
version) identifies a parameter set in the warehouse table ``run_config``; every result row
carries that ``config_id``.

This module is pure data: no I/O, no DuckDB, importable by ``qkwh.analyses``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any, Literal

CovMode = Literal["full", "diag", "global_diag"]
Eligibility = Literal["position", "strict_bucket"]
PairsMode = Literal["sampled", "exhaustive"]
BMode = Literal["eig", "centroid"]
Pairing = Literal["independent", "same_example_nearest", "row_order"]

ANALYSES: tuple[str, ...] = ("pca", "rotation", "plasticity")


@dataclass(frozen=True)
class PCAParams:
    """Combined Q/K PCA (spec §2.1).  The taxonomy thresholds belong to the dbt project."""

    n_components: int = 10
    sign_threshold: float = 0.05  # |r_q| below this -> anchor on r_k (spec §2.1 step 5)


@dataclass(frozen=True)
class RotationParams:
    """Planar rotation model (spec §2.2)."""

    b_mode: BMode = "eig"  # which b the b-metrics use (I-01); both axes are always stored
    pairing: Pairing = "independent"  # how delta = q - k is paired (I-02)
    t_active: float = 0.3  # threshold on angle_r_circ_pm for an "active" pair (§2.2.4)
    max_pairs: int = 30  # complement SVD pairs (§2.2.4 step 3)
    omega_grid: int = 512  # log-spaced omega grid size (§2.2.5)


@dataclass(frozen=True)
class PlasticityParams:
    """Attention plasticity (spec §2.3)."""

    num_pairs_per_bucket: int = 1024  # P (I-21)
    cov_mode: CovMode = "full"  # I-15
    eligibility: Eligibility = "position"  # I-18
    pairs: PairsMode = "sampled"  # §2.3.8b
    normality_max_dims: int = 64
    p_alpha: float = 0.01
    eps: float = 1e-12  # ridge added to per-bucket covariances
    var_floor: float = 1e-12  # floor for the pair variance v
    orientation: bool = True  # §2.3.1 key-mean sign orientation (parity; I-35)
    empirical: bool = False  # §2.3.10: also count with the bucket's real queries (same pairs)


@dataclass(frozen=True)
class RunConfig:
    """Every parameter of a compute run.  Defaults are the spec's (§2.3.9)."""

    seed: int = 0
    max_tokens_per_head: int = 50_000
    pca: PCAParams = field(default_factory=PCAParams)
    rotation: RotationParams = field(default_factory=RotationParams)
    plasticity: PlasticityParams = field(default_factory=PlasticityParams)

    # -- serialisation -------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def analysis_params(self, analysis: str) -> dict[str, Any]:
        """The parameters that influence one analysis' results (used for its fingerprint)."""
        if analysis not in ANALYSES:
            raise ValueError(f"unknown analysis {analysis!r}; expected one of {', '.join(ANALYSES)}")
        shared = {"seed": self.seed, "max_tokens_per_head": self.max_tokens_per_head}
        return {**shared, analysis: dataclasses.asdict(getattr(self, analysis))}

    def fingerprint(self, analysis: str, code_version: str) -> str:
        """Stable id of (analysis, its parameters, code version): 16 hex characters."""
        payload = json.dumps(
            {"analysis": analysis, "code_version": code_version, "params": self.analysis_params(analysis)},
            sort_keys=True,
        )
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RunConfig":
        """Build from a nested mapping; unknown keys raise ``ValueError`` naming the key."""
        data = dict(data or {})
        sub = {"pca": PCAParams, "rotation": RotationParams, "plasticity": PlasticityParams}
        kwargs: dict[str, Any] = {}
        top = {f.name for f in dataclasses.fields(cls)}
        for key, value in data.items():
            if key not in top:
                raise ValueError(f"unknown run-config key {key!r}")
            if key in sub:
                allowed = {f.name for f in dataclasses.fields(sub[key])}
                for k in (value or {}):
                    if k not in allowed:
                        raise ValueError(f"unknown run-config key {key}.{k!r}")
                kwargs[key] = sub[key](**(value or {}))
            else:
                kwargs[key] = value
        cfg = cls(**kwargs)
        cfg.validate()
        return cfg

    def with_overrides(self, overrides: dict[str, Any]) -> "RunConfig":
        """Apply dotted overrides such as ``{"plasticity.cov_mode": "diag", "seed": 3}``.

        String values are converted to the type of the field they replace.
        """
        data = self.to_dict()
        for dotted, raw in overrides.items():
            parts = dotted.split(".")
            node = data
            for p in parts[:-1]:
                if p not in node or not isinstance(node[p], dict):
                    raise ValueError(f"unknown parameter {dotted!r}")
                node = node[p]
            leaf = parts[-1]
            if leaf not in node or isinstance(node[leaf], dict):
                raise ValueError(f"unknown parameter {dotted!r}")
            node[leaf] = _coerce(raw, node[leaf], dotted)
        return RunConfig.from_dict(data)

    def validate(self) -> None:
        choices = {
            "rotation.b_mode": (self.rotation.b_mode, ("eig", "centroid")),
            "rotation.pairing": (self.rotation.pairing, ("independent", "same_example_nearest", "row_order")),
            "plasticity.cov_mode": (self.plasticity.cov_mode, ("full", "diag", "global_diag")),
            "plasticity.eligibility": (self.plasticity.eligibility, ("position", "strict_bucket")),
            "plasticity.pairs": (self.plasticity.pairs, ("sampled", "exhaustive")),
        }
        for name, (value, allowed) in choices.items():
            if value not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(allowed)}; got {value!r}")
        for name, value, low, high, kind in self._ranges():
            if kind is int:
                ok_type = isinstance(value, int) and not isinstance(value, bool)
                what = "an integer"
            elif kind is bool:
                ok_type, what = isinstance(value, bool), "true or false"
            else:
                ok_type = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
                what = "a finite number"
            if not ok_type:
                raise ValueError(f"{name} must be {what}; got {value!r}")
            if kind is bool:
                continue
            if not (low[0] < value or (low[1] and low[0] == value)) or \
                    (high is not None and not (value < high[0] or (high[1] and value == high[0]))):
                raise ValueError(f"{name} must be in {_interval(low, high)}; got {value!r}")

    def _ranges(self) -> list[tuple[str, Any, tuple[float, bool], tuple[float, bool] | None, type]]:
        """(name, value, (low, closed), (high, closed) or None for no upper bound, type) of every
        numeric or boolean parameter: the allowed range :meth:`validate` enforces."""
        p, r, a = self.pca, self.rotation, self.plasticity
        at_least = lambda x: (x, True)  # noqa: E731
        above = lambda x: (x, False)  # noqa: E731
        return [
            ("seed", self.seed, at_least(0), None, int),
            ("max_tokens_per_head", self.max_tokens_per_head, at_least(1), None, int),
            ("pca.n_components", p.n_components, at_least(1), None, int),
            ("pca.sign_threshold", p.sign_threshold, at_least(0.0), (1.0, True), float),  # a |correlation|
            ("rotation.t_active", r.t_active, at_least(0.0), (1.0, True), float),  # angle_r_circ_pm is in [0, 1]
            ("rotation.max_pairs", r.max_pairs, at_least(1), None, int),
            ("rotation.omega_grid", r.omega_grid, at_least(1), None, int),
            ("plasticity.num_pairs_per_bucket", a.num_pairs_per_bucket, at_least(1), None, int),
            ("plasticity.normality_max_dims", a.normality_max_dims, at_least(1), None, int),
            ("plasticity.p_alpha", a.p_alpha, above(0.0), (1.0, False), float),  # a significance level
            ("plasticity.eps", a.eps, at_least(0.0), None, float),  # a ridge
            ("plasticity.var_floor", a.var_floor, at_least(0.0), None, float),
            ("plasticity.orientation", a.orientation, at_least(0), None, bool),
            ("plasticity.empirical", a.empirical, at_least(0), None, bool),
        ]


def _interval(low: tuple[float, bool], high: tuple[float, bool] | None) -> str:
    left = ("[" if low[1] else "(") + f"{low[0]:g}"
    right = "inf)" if high is None else f"{high[0]:g}" + ("]" if high[1] else ")")
    return f"{left}, {right}"


def pair_seed(seed: int, layer: int, q_head: int) -> int:
    """Seed of a head's pair sampler: ``seed + 10007*layer + 379*q_head`` (spec §2.3.5)."""
    return int(seed) + 10007 * int(layer) + 379 * int(q_head)


def _coerce(raw: Any, current: Any, name: str) -> Any:
    if not isinstance(raw, str):
        return raw
    try:
        if isinstance(current, bool):
            low = raw.lower()
            if low in ("true", "1", "yes"):
                return True
            if low in ("false", "0", "no"):
                return False
            raise ValueError
        if isinstance(current, int):
            return int(raw)
        if isinstance(current, float):
            return float(raw)
    except ValueError:
        raise ValueError(f"parameter {name}: cannot read {raw!r} as {type(current).__name__}") from None
    return raw
