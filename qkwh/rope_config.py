"""RoPE planes and frequencies of an attention head, from the model's own parameters (pure numpy).

These are facts of a model's config, shared by capture (which records them), ingest (which
resolves them) and the rope analysis (which reads the planes).

A rotary position embedding (RoPE) turns pairs of head dimensions ("planes") by an angle
proportional to the token position: plane i turns by ``position * inv_freq[i]`` radians.  This
module computes ``inv_freq`` (radians per token, float64) from a model's rope parameters for the
rope types ``default``, ``linear``, ``llama3`` and ``yarn`` (implemented from the published
formulas: Su et al. 2021; Chen et al. 2023 position interpolation; Meta's Llama 3.1 release;
Peng et al. 2023 YaRN), reads those parameters from a model's ``config.json`` (the spellings of
transformers 4 and 5), and lays the planes out over the head's dimensions
(docs/metrics/rope.md).

Shapes and units: ``d`` = head dimension; ``d_rot`` = rotated width (even, <= d); an inv_freq
vector has shape ``(d_rot // 2,)`` in radians per token; a wavelength is ``2*pi / inv_freq``
tokens (``+inf`` for an unrotated dim).  No I/O here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

ROPE_TYPES = ("default", "linear", "llama3", "yarn")
LAYOUTS = ("half", "interleaved")
BANDS = ("high", "mid", "low", "unrotated")

#: model types (config.json ``model_type``) whose RoPE turns adjacent dims (2i, 2i+1) together;
#: every other RoPE architecture turns (i, i + d_rot/2).  Found by pushing basis vectors through
#: each architecture's own ``apply_rotary_pos_emb`` in transformers (a capture records the layout
#: it measures on the model itself; this table serves datasets without that record, and a test
#: re-measures it when transformers is installed).
INTERLEAVED_MODEL_TYPES = frozenset(
    {
        "cohere",
        "cohere2",
        "cohere2_moe",
        "ernie4_5",
        "ernie4_5_moe",
        "glm",
        "glm4",
        "helium",
    }
)


def layout_of_model_type(model_type: str | None) -> str:
    """``interleaved`` for a model type in :data:`INTERLEAVED_MODEL_TYPES`, else ``half``."""
    return "interleaved" if str(model_type or "") in INTERLEAVED_MODEL_TYPES else "half"


class RopeParameterError(ValueError):
    """A rope parameter is missing or unusable; the message names the field."""


@dataclass(frozen=True)
class RopeParameters:
    """The rope parameters of one kind of layer.

    rope_type : one of :data:`ROPE_TYPES`
    theta : the base (``rope_theta``)
    head_dim : d, the head dimension
    partial_rotary_factor : share of d that is rotated (1 = all)
    scaling : the type's own fields (factor, low_freq_factor, high_freq_factor,
        original_max_position_embeddings, beta_fast, beta_slow, mscale, mscale_all_dim,
        attention_factor, truncate)
    max_position_embeddings : the model's context (yarn uses it when ``factor`` is absent)
    """

    rope_type: str
    theta: float
    head_dim: int
    partial_rotary_factor: float = 1.0
    scaling: Mapping[str, Any] = field(default_factory=dict)
    max_position_embeddings: int | None = None

    @property
    def rotary_dim(self) -> int:
        """d_rot = int(d * partial_rotary_factor), as transformers rounds it."""
        return rotary_dim(self.head_dim, self.partial_rotary_factor)

    def frequencies(self) -> tuple[np.ndarray, float]:
        """(inv_freq (d_rot // 2,) float64 radians per token, attention scaling)."""
        return inv_freq(
            self.rope_type,
            self.theta,
            self.rotary_dim,
            self.scaling,
            max_position_embeddings=self.max_position_embeddings,
        )


def rotary_dim(head_dim: int, partial_rotary_factor: float = 1.0) -> int:
    """d_rot = int(head_dim * partial_rotary_factor) (truncated, like transformers); must be even."""
    if not 0 < partial_rotary_factor <= 1:
        raise RopeParameterError(
            f"partial_rotary_factor must be in (0, 1], not {partial_rotary_factor}"
        )
    d_rot = int(head_dim * partial_rotary_factor)
    if d_rot % 2:
        raise RopeParameterError(
            f"rotated width {d_rot} (head_dim {head_dim} x partial_rotary_factor "
            f"{partial_rotary_factor}) is odd; a plane needs two dims"
        )
    return d_rot


def _need(scaling: Mapping[str, Any], name: str, rope_type: str) -> float:
    """A required scaling field: a finite positive number (every one of them is a factor, a
    ratio or a context length)."""
    value = scaling.get(name)
    if value is None:
        raise RopeParameterError(f"rope type {rope_type!r} needs {name!r}, which is missing")
    number = _number(value, f"rope type {rope_type!r}: {name!r}")
    if not number > 0:
        raise RopeParameterError(
            f"rope type {rope_type!r}: {name!r} must be positive, not {value!r}"
        )
    return number


def _number(value: Any, what: str) -> float:
    """``value`` as a finite float (bools, strings, lists and non-finite values refused)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise RopeParameterError(f"{what} is not a number ({value!r})")
    number = float(value)
    if not math.isfinite(number):
        raise RopeParameterError(f"{what} is not a finite number ({value!r})")
    return number


def _optional(scaling: Mapping[str, Any], name: str, rope_type: str, default: float) -> float:
    value = scaling.get(name)
    return default if value is None else _number(value, f"rope type {rope_type!r}: {name!r}")


def default_inv_freq(theta: float, d_rot: int) -> np.ndarray:
    """theta^(-2i/d_rot), i = 0 ... d_rot/2 - 1 (float64, radians per token)."""
    if not (isinstance(theta, (int, float, np.integer, np.floating)) and 0 < theta < math.inf):
        raise RopeParameterError(f"rope_theta must be a finite positive number, not {theta!r}")
    i = np.arange(0, d_rot, 2, dtype=np.float64)
    return 1.0 / (float(theta) ** (i / d_rot))


def inv_freq(
    rope_type: str,
    theta: float,
    d_rot: int,
    scaling: Mapping[str, Any] | None = None,
    *,
    max_position_embeddings: int | None = None,
) -> tuple[np.ndarray, float]:
    """(inv_freq, attention_scaling) of a rope type.

    inv_freq : (d_rot // 2,) float64, radians per token, plane i first
    attention_scaling : the factor the type applies to cos/sin (yarn's mscale); 1.0 otherwise

    ``default``: theta^(-2i/d_rot).  ``linear``: default / factor.  ``llama3``: planes with
    wavelength above original_max_position_embeddings / low_freq_factor are divided by factor,
    those below original / high_freq_factor kept, those between interpolated smoothly.
    ``yarn``: a linear ramp over planes between interpolation (default / factor) and
    extrapolation (default), the ramp's ends where the plane turns beta_slow and beta_fast times
    in the original context (rounded outwards unless ``truncate`` is false); attention scaling
    0.1 ln(factor) + 1 (or mscale / mscale_all_dim of that, or the given attention_factor).
    """
    with np.errstate(all="ignore"):  # a degenerate parameter shows as a refused result below
        out, attention = _inv_freq(
            rope_type, theta, d_rot, dict(scaling or {}), max_position_embeddings
        )
    if not (np.all(np.isfinite(out)) and np.all(out > 0)):
        raise RopeParameterError(
            f"rope type {rope_type!r}: its parameters give frequencies that are not finite and "
            "positive"
        )
    if not 0 < attention < math.inf:
        raise RopeParameterError(
            f"rope type {rope_type!r}: attention scaling {attention} is not finite and positive"
        )
    return out, attention


def _inv_freq(
    rope_type: str,
    theta: float,
    d_rot: int,
    scaling: dict[str, Any],
    max_position_embeddings: int | None,
) -> tuple[np.ndarray, float]:
    base = default_inv_freq(theta, d_rot)
    if rope_type == "default":
        return base, 1.0
    if rope_type == "linear":
        return base / _need(scaling, "factor", rope_type), 1.0
    if rope_type == "llama3":
        factor = _need(scaling, "factor", rope_type)
        low = _need(scaling, "low_freq_factor", rope_type)
        high = _need(scaling, "high_freq_factor", rope_type)
        original = _need(scaling, "original_max_position_embeddings", rope_type)
        if not high > low:
            raise RopeParameterError(
                f"rope type 'llama3': high_freq_factor {high:g} must exceed low_freq_factor {low:g}"
            )
        wavelength = 2 * math.pi / base
        low_wavelength, high_wavelength = original / low, original / high
        out = np.where(wavelength > low_wavelength, base / factor, base)
        smooth = (original / wavelength - low) / (high - low)
        medium = (wavelength >= high_wavelength) & (wavelength <= low_wavelength)
        out = np.where(medium, (1 - smooth) * out / factor + smooth * out, out)
        return out, 1.0
    if rope_type == "yarn":
        return _yarn(base, float(theta), d_rot, scaling, max_position_embeddings)
    raise RopeParameterError(
        f"rope type {rope_type!r} is not supported (supported: {', '.join(ROPE_TYPES)})"
    )


def _yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def _yarn(
    base: np.ndarray,
    theta: float,
    d_rot: int,
    scaling: Mapping[str, Any],
    max_position_embeddings: int | None,
) -> tuple[np.ndarray, float]:
    original = _need(scaling, "original_max_position_embeddings", "yarn")
    if scaling.get("factor") is None:  # DeepSeek-V3 style: the ratio of the two contexts
        if not max_position_embeddings or max_position_embeddings <= 0:
            raise RopeParameterError(
                "rope type 'yarn' needs 'factor' (or max_position_embeddings), which is missing"
            )
        factor = max_position_embeddings / original
    else:
        factor = _need(scaling, "factor", "yarn")
    attention = scaling.get("attention_factor")
    if attention is None:
        mscale = _optional(scaling, "mscale", "yarn", 0.0)
        mscale_all = _optional(scaling, "mscale_all_dim", "yarn", 0.0)
        if mscale and mscale_all:
            attention = _yarn_mscale(factor, mscale) / _yarn_mscale(factor, mscale_all)
        else:
            attention = _yarn_mscale(factor)
    else:
        attention = _number(attention, "rope type 'yarn': 'attention_factor'")
    beta_fast = _optional(scaling, "beta_fast", "yarn", 0.0) or 32.0
    beta_slow = _optional(scaling, "beta_slow", "yarn", 0.0) or 1.0

    def correction_dim(
        turns: float,
    ) -> float:  # the (fractional) plane that turns `turns` times in `original`
        return d_rot * math.log(original / (turns * 2 * math.pi)) / (2 * math.log(theta))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if scaling.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, d_rot - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(d_rot // 2, dtype=np.float64) - low) / (high - low), 0.0, 1.0)
    extrapolation = 1.0 - ramp  # 1: keep the plane's frequency; 0: divide it by factor
    out = (base / factor) * (1 - extrapolation) + base * extrapolation
    return out, float(attention)


# ---------------------------------------------------------------------------------------------
# planes
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plane:
    """One plane of a head: two rotated dims, or one unrotated dim (dim_b None).

    inv_freq in radians per token (0 when unrotated); wavelength = 2 pi / inv_freq tokens
    (+inf when unrotated); band: ``high`` | ``mid`` | ``low`` | ``unrotated``.
    """

    plane: int
    dim_a: int
    dim_b: int | None
    inv_freq: float
    wavelength: float
    band: str


def band_of(wavelength: float, bucket_size: int, context_length: int) -> str:
    """``high`` if wavelength < m, ``low`` if wavelength >= L_ctx, else ``mid``; +inf: ``unrotated``."""
    if math.isinf(wavelength):
        return "unrotated"
    if wavelength < bucket_size:
        return "high"
    if wavelength >= context_length:
        return "low"
    return "mid"


def plane_dims(plane: int, d_rot: int, layout: str = "half") -> tuple[int, int]:
    """(dim_a, dim_b) of rotated plane ``plane``: (i, i + d_rot/2) for ``half``, (2i, 2i+1) for
    ``interleaved``."""
    if layout == "half":
        return plane, plane + d_rot // 2
    if layout == "interleaved":
        return 2 * plane, 2 * plane + 1
    raise RopeParameterError(f"rope layout must be one of {', '.join(LAYOUTS)}, not {layout!r}")


def planes(
    head_dim: int,
    frequencies: Sequence[float] | np.ndarray | None,
    *,
    bucket_size: int,
    context_length: int,
    layout: str = "half",
) -> list[Plane]:
    """The planes of a head of width ``head_dim``.

    frequencies : inv_freq (d_rot // 2,) of the rotated planes, or None for a NoPE layer (every
        dim unrotated)
    The rotated planes come first (plane i, dims by :func:`plane_dims`), then one plane of width 1
    per unrotated dim (dims d_rot ... d - 1, or all dims of a NoPE layer), numbered after them.
    """
    freqs = np.zeros(0) if frequencies is None else np.asarray(frequencies, dtype=np.float64)
    if freqs.ndim != 1:
        raise RopeParameterError(f"inv_freq must be a vector, not shape {freqs.shape}")
    d_rot = 2 * freqs.size
    if d_rot > head_dim:
        raise RopeParameterError(
            f"{freqs.size} rotated planes need {d_rot} dims; the head has {head_dim}"
        )
    if np.any(~np.isfinite(freqs)) or np.any(freqs <= 0):
        raise RopeParameterError("inv_freq must be finite and positive")
    out: list[Plane] = []
    for i, f in enumerate(freqs):
        a, b = plane_dims(i, d_rot, layout)
        wl = 2 * math.pi / float(f)
        out.append(Plane(i, a, b, float(f), wl, band_of(wl, bucket_size, context_length)))
    for j, dim in enumerate(range(d_rot, head_dim)):
        out.append(Plane(freqs.size + j, dim, None, 0.0, math.inf, "unrotated"))
    return out


# ---------------------------------------------------------------------------------------------
# model config.json
# ---------------------------------------------------------------------------------------------


def _text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """The language model's part of a (multimodal) config: ``text_config`` when the top level
    has no attention heads."""
    text = config.get("text_config")
    if isinstance(text, Mapping) and "num_attention_heads" not in config:
        return text
    return config


def _one(
    raw: Mapping[str, Any], cfg: Mapping[str, Any], head_dim: int, where: str
) -> RopeParameters:
    params = dict(raw)
    rope_type = params.get("rope_type") or params.get("type") or "default"
    if not isinstance(rope_type, str):
        raise RopeParameterError(f"{where}: rope type {rope_type!r} is not a name")
    if rope_type == "su":  # transformers' old names
        rope_type = "longrope"
    theta = params.get("rope_theta", cfg.get("rope_theta"))
    if theta is None:
        raise RopeParameterError(
            f"{where}: no rope_theta (neither in rope_parameters nor at the top level)"
        )
    prf = params.get("partial_rotary_factor", cfg.get("partial_rotary_factor"))
    if prf is None and cfg.get("rotary_pct") is not None:  # GPT-NeoX spelling
        prf = cfg["rotary_pct"]
    if rope_type not in ROPE_TYPES:
        raise RopeParameterError(
            f"{where}: rope type {rope_type!r} is not supported "
            f"(supported: {', '.join(ROPE_TYPES)})"
        )
    scaling = {
        k: v
        for k, v in params.items()
        if k not in ("rope_type", "type", "rope_theta", "partial_rotary_factor")
    }
    if (
        rope_type == "yarn"
        and "original_max_position_embeddings" not in scaling
        and cfg.get("original_max_position_embeddings") is not None
    ):
        scaling["original_max_position_embeddings"] = cfg["original_max_position_embeddings"]
    mpe = cfg.get("max_position_embeddings")
    try:
        out = RopeParameters(
            rope_type,
            _number(theta, "rope_theta"),
            int(head_dim),
            _number(prf, "partial_rotary_factor") if prf is not None else 1.0,
            scaling,
            int(_number(mpe, "max_position_embeddings")) if mpe else None,
        )
        out.frequencies()  # every field the type needs is there (raises naming the missing one)
    except RopeParameterError as exc:
        raise RopeParameterError(f"{where}: {exc}") from None
    return out


def parameters_from_config(
    config: Mapping[str, Any], *, where: str = "config.json"
) -> dict[str, RopeParameters]:
    """The rope parameters of a model config (config.json as a dict), per layer type.

    Reads ``rope_parameters`` (transformers 5: one mapping, or one per layer type such as
    ``full_attention`` / ``sliding_attention``), else ``rope_scaling`` (transformers 4, with
    ``type`` or ``rope_type``) beside a top-level ``rope_theta``; ``partial_rotary_factor`` (or
    GPT-NeoX's ``rotary_pct``); ``head_dim``, else ``hidden_size // num_attention_heads``.
    Returns {layer type: parameters}; the key is ``"all"`` when every layer shares them.
    Raises :class:`RopeParameterError` naming the missing or unsupported field.
    """
    cfg = _text_config(config)
    head_dim = cfg.get("head_dim")
    if not head_dim:
        hidden, heads = cfg.get("hidden_size"), cfg.get("num_attention_heads")
        if not hidden or not heads:
            raise RopeParameterError(
                f"{where}: no head_dim (nor hidden_size and num_attention_heads)"
            )
        head_dim = _count(hidden, f"{where}: hidden_size") // _count(
            heads, f"{where}: num_attention_heads"
        )
    head_dim = _count(head_dim, f"{where}: head_dim")
    raw = cfg.get("rope_parameters")
    if isinstance(raw, Mapping) and raw and all(isinstance(v, Mapping) for v in raw.values()):
        return {
            str(kind): _one(p, cfg, int(head_dim), f"{where} rope_parameters[{kind!r}]")
            for kind, p in raw.items()
        }
    if not isinstance(raw, Mapping) or not raw:
        raw = cfg.get("rope_scaling") or {}
        if not isinstance(raw, Mapping):
            raise RopeParameterError(f"{where}: rope_scaling is not an object ({raw!r})")
    return {"all": _one(raw, cfg, int(head_dim), where)}


def _count(value: Any, what: str) -> int:
    """A positive whole number of a config (``64`` or ``64.0``), else RopeParameterError."""
    number = _number(value, what)
    if not (number > 0 and number == int(number)):
        raise RopeParameterError(f"{what} is not a positive whole number ({value!r})")
    return int(number)


def layout_from_config(config: Mapping[str, Any]) -> str:
    """The RoPE layout of a config's architecture (its ``model_type``, the text model's in a
    multimodal config): :func:`layout_of_model_type`."""
    text = _text_config(config)
    return layout_of_model_type(text.get("model_type") or config.get("model_type"))


def layer_types_from_config(config: Mapping[str, Any]) -> list[str] | None:
    """``layer_types`` of a config (one attention type per layer), or None."""
    kinds = _text_config(config).get("layer_types")
    return (
        [str(k) for k in kinds]
        if isinstance(kinds, Sequence) and not isinstance(kinds, str)
        else None
    )


def nope_layers_from_config(config: Mapping[str, Any]) -> list[int]:
    """Layers without RoPE: SmolLM3/Llama 4 ``no_rope_layers`` (one flag per layer, 0 = NoPE)."""
    flags = _text_config(config).get("no_rope_layers")
    if not isinstance(flags, Sequence) or isinstance(flags, str):
        return []
    return [i for i, flag in enumerate(flags) if not flag]
