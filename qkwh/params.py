"""The run config: the run-wide parameters and one parameter section per registered analysis.

Each analysis declares its parameter class (a frozen dataclass) with the rest of its declaration
(:mod:`qkwh.analyses.registry`; the built-in ones in :mod:`qkwh.analyses.declared`).  One
:class:`RunConfig` travels from the YAML run config
(``configs/run.yaml``: one section per registered analysis) through the compute layer into the
analyses.  :meth:`RunConfig.validate` is the one parameter check.  Its
:meth:`RunConfig.fingerprint` (together with the code version) identifies a parameter set in the
warehouse table ``run_config``; every result row carries that ``config_id``.

This module is pure data: no I/O, no DuckDB, no compute; importable by ``qkwh.analyses``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import typing
from dataclasses import dataclass, field
from typing import Any, Literal

from qkwh.analyses import registry as _analyses


def _registry():
    """The analysis registry."""
    return _analyses


@dataclass(frozen=True)
class RunConfig:
    """Every parameter of a compute run: the run-wide ones and one section per registered analysis.

    ``params`` holds ``(analysis name, its parameter object)`` pairs; read a section with
    :meth:`params_of` or as an attribute (``config.plasticity.cov_mode``).  An analysis
    registered after the config was built gets its default parameters.
    """

    seed: int = field(
        default=0, metadata={"ge": 0}
    )  # base seed; a head's pair sampler uses pair_seed(seed, layer, q_head)
    max_tokens_per_head: int = field(
        default=50_000, metadata={"gt": 0}
    )  # cap on Q rows and on K rows
    params: tuple[tuple[str, Any], ...] = field(
        default_factory=lambda: tuple(_registry().default_params().items())
    )

    def params_of(self, analysis: str) -> Any:
        """The parameter object of ``analysis``: its section in this config, else the registered
        analysis's defaults (``ValueError`` when it has neither)."""
        for name, value in self.params:
            if name == analysis:
                return value
        reg = _registry()
        if analysis not in reg.names():
            raise ValueError(
                f"unknown analysis {analysis!r}; expected one of {', '.join(reg.names())}"
            )
        return reg.get(analysis).default_params()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name == "params":  # not a section (and never during unpickling)
            raise AttributeError(name)
        try:
            return self.params_of(name)
        except ValueError:
            raise AttributeError(f"RunConfig has no attribute or analysis {name!r}") from None

    def resolved(self) -> RunConfig:
        """This config with its own section for every registered analysis (a worker process,
        which may not know an analysis registered at run time, needs nothing else)."""
        return dataclasses.replace(self, params=tuple(self._sections().items()))

    def _sections(self) -> dict[str, Any]:
        """analysis -> parameter object for every registered analysis, in registry order."""
        return {name: self.params_of(name) for name in _registry().names()}

    # -- serialisation -------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The nested mapping of the YAML run config (``configs/run.yaml``)."""
        return {
            "seed": self.seed,
            "max_tokens_per_head": self.max_tokens_per_head,
            **{name: dataclasses.asdict(p) for name, p in self._sections().items()},
        }

    def analysis_params(self, analysis: str) -> dict[str, Any]:
        """The parameters that influence one analysis' results (used for its fingerprint)."""
        shared = {"seed": self.seed, "max_tokens_per_head": self.max_tokens_per_head}
        uses = _registry().get(analysis).uses if analysis in _registry().names() else ()
        return {
            **shared,
            analysis: dataclasses.asdict(self.params_of(analysis)),
            **{u: dataclasses.asdict(self.params_of(u)) for u in uses},
        }

    def fingerprint(self, analysis: str, code_version: str) -> str:
        """Stable id of (analysis, its parameters, code version): 16 hex characters."""
        payload = json.dumps(
            {
                "analysis": analysis,
                "code_version": code_version,
                "params": self.analysis_params(analysis),
            },
            sort_keys=True,
        )
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunConfig:
        """Build from a nested mapping and validate; unknown keys raise ``ValueError`` naming the key."""
        data = dict(data or {})
        reg = _registry()
        kwargs: dict[str, Any] = {}
        sections: dict[str, Any] = {}
        for key, value in data.items():
            if key in ("seed", "max_tokens_per_head"):
                kwargs[key] = value
            elif key in reg.names():
                if value is not None and not isinstance(value, dict):
                    raise ValueError(f"run-config section {key!r} must be a mapping")
                params_cls = reg.get(key).params
                allowed = {f.name for f in dataclasses.fields(params_cls)}
                for k in value or {}:
                    if k not in allowed:
                        raise ValueError(f"unknown run-config key {key}.{k!r}")
                sections[key] = params_cls(**(value or {}))
            else:
                raise ValueError(f"unknown run-config key {key!r}")
        params = tuple(
            (name, sections.get(name) or reg.get(name).default_params()) for name in reg.names()
        )
        cfg = cls(**kwargs, params=params)
        cfg.validate()
        return cfg

    def with_overrides(self, overrides: dict[str, Any]) -> RunConfig:
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
        """The one check of every parameter, run-wide and of every analysis section.

        Driven by the parameter classes: a ``Literal`` field must hold one of its values, a
        bool/int/float/str field a value of that type, and a field's ``metadata`` bounds
        (``gt``, ``ge``, ``lt``, ``le``) must hold.  Raises ``ValueError`` naming the parameter.
        """
        for f in dataclasses.fields(self):
            if f.name != "params":
                _check_field(
                    f.name, getattr(self, f.name), f, typing.get_type_hints(RunConfig)[f.name]
                )
        reg = _registry()
        for section, params in self._sections().items():
            expected = reg.get(section).params if section in reg.names() else None
            if expected is not None and not isinstance(params, expected):
                raise ValueError(
                    f"{section}: parameters must be a {expected.__name__}, not {type(params).__name__}"
                )
            hints = typing.get_type_hints(type(params))
            for f in dataclasses.fields(params):
                _check_field(f"{section}.{f.name}", getattr(params, f.name), f, hints[f.name])


def _check_field(name: str, value: Any, f: dataclasses.Field, hint: Any) -> None:
    if typing.get_origin(hint) is Literal:
        allowed = typing.get_args(hint)
        if value not in allowed:
            raise ValueError(f"{name} must be one of {', '.join(map(str, allowed))}; got {value!r}")
        return
    bounds = {k: f.metadata[k] for k in ("gt", "ge", "lt", "le") if k in f.metadata}
    if hint is bool and not isinstance(value, bool):
        raise ValueError(f"{name} must be true or false; got {value!r}")
    if hint is int and (not isinstance(value, int) or isinstance(value, bool)):
        kind = "a positive integer" if bounds == {"gt": 0} else "an integer"
        raise ValueError(f"{name} must be {kind}; got {value!r}")
    if hint is float and (not isinstance(value, (int, float)) or isinstance(value, bool)):
        raise ValueError(f"{name} must be a number; got {value!r}")
    if hint is float and not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number; got {value!r}")
    if hint is str and not isinstance(value, str):
        raise ValueError(f"{name} must be a string; got {value!r}")
    if hint is int and bounds == {"gt": 0} and value <= 0:
        raise ValueError(f"{name} must be a positive integer; got {value!r}")
    ops = {
        "gt": (lambda v, b: v > b, ">"),
        "ge": (lambda v, b: v >= b, ">="),
        "lt": (lambda v, b: v < b, "<"),
        "le": (lambda v, b: v <= b, "<="),
    }
    for key, bound in bounds.items():
        ok, sign = ops[key]
        if not ok(value, bound):
            low = [k for k in ("gt", "ge") if k in bounds]
            high = [k for k in ("lt", "le") if k in bounds]
            if low and high:  # both ends: name the interval, e.g. [0, 1] or (0, 1)
                raise ValueError(
                    f"{name} must be in {'(' if low[0] == 'gt' else '['}{bounds[low[0]]:g}, "
                    f"{bounds[high[0]]:g}{')' if high[0] == 'lt' else ']'}; got {value!r}"
                )
            raise ValueError(f"{name} must be {sign} {bound}; got {value!r}")


def pair_seed(seed: int, layer: int, q_head: int) -> int:
    """Seed of a head's pair sampler: ``seed + 10007*layer + 379*q_head``."""
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
        raise ValueError(
            f"parameter {name}: cannot read {raw!r} as {type(current).__name__}"
        ) from None
    return raw


def __getattr__(name: str) -> Any:
    """``ANALYSES``: the registered analysis names (read from the registry when asked)."""
    if name == "ANALYSES":
        return _registry().names()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
