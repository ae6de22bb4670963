"""Load a causal LM with its tokenizer, describe its attention layout, and hook its attention.

The hook is an attention function registered with transformers' ``AttentionInterface``: every
attention module of the model hands it the query and key tensors it is about to attend with
(after the per-head q/k norms where the architecture has them, after RoPE on RoPE layers, raw
projections on NoPE layers, keys before the GQA repetition) and the sliding window it uses.  The
function passes them to a callback, then delegates to the implementation the model was loaded
with (SDPA or eager), whose attention masks are kept, so the forward pass is unchanged.

torch and transformers are imported lazily: importing this module costs nothing.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qkwh.errors import InputError

HOOK_NAME = "qkwh_capture"
DTYPES = ("float32", "bfloat16")
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")

#: signature of the callback: (layer, query (1, n_q, T, d), key (1, n_kv, T, d), sliding_window)
AttentionCallback = Callable[[int, Any, Any, "int | None"], None]


@dataclass(frozen=True)
class ModelInfo:
    """What a capture records about the model (all from its config)."""

    name: str
    source: str
    kind: str  # 'folder' | 'hub' | 'gguf'
    model_type: str
    num_layers: int
    num_query_heads: int
    num_key_heads: int
    head_dim: int
    max_position_embeddings: int | None
    sliding_layers: frozenset[int]
    sliding_window: int | None
    rope_theta: float | None
    rope_type: str | None
    dtype: str
    rope_frequencies: dict[str, Any] | None = None  # the rotary modules' own vectors (rope_record)

    def metadata(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "head_dim": self.head_dim,
            "model_dtype": self.dtype,
            "model_type": self.model_type,
            "model_source": self.source,
            "num_attention_heads": self.num_query_heads,
            "num_hidden_layers": self.num_layers,
            "num_key_value_heads": self.num_key_heads,
        }
        if self.max_position_embeddings is not None:
            out["max_position_embeddings"] = self.max_position_embeddings
        if self.rope_theta is not None:
            out["rope_theta"] = self.rope_theta
        if self.rope_type is not None:
            out["rope_type"] = self.rope_type
        if self.sliding_window is not None:
            out["model_sliding_window"] = self.sliding_window
        if (
            self.rope_frequencies is not None
        ):  # one JSON string: the card's `key`: `value` lines stay flat
            out["rope_frequencies"] = json.dumps(self.rope_frequencies, sort_keys=True)
        return out


def resolve(model: str) -> tuple[str, str, dict[str, Any]]:
    """(kind, display name, from_pretrained arguments) of a MODEL argument; InputError if it is
    neither a model folder, a .gguf file nor a Hub id.  Cheap: nothing is loaded."""
    p = Path(model).expanduser()
    if p.is_file():
        if p.suffix.lower() != ".gguf":
            raise InputError(f"{p}: a model file must be a .gguf file (or pass the model's folder)")
        return (
            "gguf",
            p.stem,
            {"pretrained_model_name_or_path": str(p.resolve().parent), "gguf_file": p.name},
        )
    if p.is_dir():
        if not (p / "config.json").is_file():
            raise InputError(f"{p}: not a Hugging Face model folder (no config.json inside)")
        return "folder", p.resolve().name, {"pretrained_model_name_or_path": str(p.resolve())}
    if _HUB_ID.match(model) and not model.startswith((".", "~")):
        return "hub", model, {"pretrained_model_name_or_path": model}
    raise InputError(f"{model}: no such model folder or GGUF file (nor a Hub id like OWNER/NAME)")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def load(model: str, *, dtype: str = "float32") -> tuple[Any, Any, ModelInfo]:
    """(model in eval mode on CPU, tokenizer, :class:`ModelInfo`).

    A Hub id is looked up in the local Hugging Face cache first, so a cached model loads with no
    network (and ``HF_HUB_OFFLINE=1`` is honoured); only an uncached id is downloaded.
    """
    if dtype not in DTYPES:
        raise InputError(f"--dtype must be one of {', '.join(DTYPES)}, not {dtype!r}")
    kind, name, args = resolve(model)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch_dtype = getattr(torch, dtype)

    def attempt(local_only: bool) -> tuple[Any, Any]:
        kw = dict(args, local_files_only=local_only)
        tok = AutoTokenizer.from_pretrained(**kw)
        lm = AutoModelForCausalLM.from_pretrained(**kw, dtype=torch_dtype)
        return tok, lm

    offline = os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")
    try:
        try:
            tokenizer, lm = attempt(local_only=True)
        except OSError:
            if kind != "hub" or offline:
                raise
            tokenizer, lm = attempt(local_only=False)
    except (OSError, ValueError, KeyError, ImportError) as exc:
        where = "the Hugging Face cache or the Hub" if kind == "hub" else "disk"
        raise InputError(
            f"{model}: cannot load the model or its tokenizer from {where} ({_first_line(exc)})"
        ) from None
    lm.eval()
    return lm, tokenizer, describe(lm, name=name, source=model, kind=kind, dtype=dtype)


def describe(lm: Any, *, name: str, source: str, kind: str, dtype: str) -> ModelInfo:
    """:class:`ModelInfo` from a loaded model's (text) config."""
    cfg = lm.config.get_text_config() if hasattr(lm.config, "get_text_config") else lm.config
    n_layers = int(getattr(cfg, "num_hidden_layers", 0) or 0)
    n_q = int(getattr(cfg, "num_attention_heads", 0) or 0)
    n_kv = int(getattr(cfg, "num_key_value_heads", None) or n_q)
    if not (n_layers and n_q):
        raise InputError(
            f"{source}: the model config has no num_hidden_layers / num_attention_heads"
        )
    head_dim = getattr(cfg, "head_dim", None) or int(cfg.hidden_size) // n_q
    layer_types = getattr(cfg, "layer_types", None) or []
    sliding = frozenset(
        i for i, t in enumerate(layer_types[:n_layers]) if str(t) == "sliding_attention"
    )
    window = getattr(cfg, "sliding_window", None)
    theta, rope_type = _rope(cfg)
    return ModelInfo(
        name=name,
        source=source,
        kind=kind,
        model_type=str(getattr(cfg, "model_type", "")),
        num_layers=n_layers,
        num_query_heads=n_q,
        num_key_heads=n_kv,
        head_dim=int(head_dim),
        max_position_embeddings=getattr(cfg, "max_position_embeddings", None),
        sliding_layers=sliding,
        sliding_window=int(window) if window and sliding else None,
        rope_theta=theta,
        rope_type=rope_type,
        dtype=dtype,
        rope_frequencies=rope_record(lm, cfg, int(head_dim)),
    )


def rope_record(lm: Any, cfg: Any, head_dim: int) -> dict[str, Any] | None:
    """What the model's rotary modules use, read from the modules themselves (None without any):

    ``by_type``: {layer type: {"inv_freq": [radians per token, plane 0 first],
    "attention_scaling": float}}; layer type ``all`` when one module serves every layer, else
    the model's layer types (``full_attention``, ``sliding_attention``, ...).
    ``layer_types``: the attention type of each layer (None when ``all``); ``nope_layers``: layers
    without RoPE; ``partial_rotary_factor``; ``layout``: ``half`` or ``interleaved``, found by
    pushing basis vectors through the architecture's own RoPE (:func:`rope_pairs`), else None.
    Read by :mod:`qkwh.rope_sources` at ingest (docs/metrics/rope.md).
    """
    from qkwh.rope_config import nope_layers_from_config

    by_type: dict[str, dict[str, Any]] = {}
    module_of_rope = None
    for _name, module in lm.named_modules():
        buffers = dict(module.named_buffers(recurse=False))
        for bname, buf in buffers.items():
            if not bname.endswith("inv_freq") or "original" in bname:
                continue
            kind = bname[: -len("_inv_freq")] if bname != "inv_freq" else "all"
            scaling = getattr(
                module, "attention_scaling" if kind == "all" else f"{kind}_attention_scaling", 1.0
            )
            by_type.setdefault(
                kind,
                {
                    "inv_freq": [float(x) for x in buf.detach().to("cpu").double().tolist()],
                    "attention_scaling": float(scaling if scaling is not None else 1.0),
                },
            )
            module_of_rope = module_of_rope or module
    if not by_type:
        return None
    params = getattr(cfg, "rope_parameters", None)
    if isinstance(params, dict) and params and all(isinstance(v, dict) for v in params.values()):
        params = params.get("full_attention") or next(iter(params.values()))
    prf = (params or {}).get("partial_rotary_factor") if isinstance(params, dict) else None
    prf = prf if prf is not None else getattr(cfg, "partial_rotary_factor", None)
    layer_types = getattr(cfg, "layer_types", None)
    return {
        "by_type": by_type,
        "layer_types": [str(t) for t in layer_types]
        if "all" not in by_type and layer_types
        else None,
        "nope_layers": nope_layers_from_config(cfg.to_dict()) if hasattr(cfg, "to_dict") else [],
        "partial_rotary_factor": float(prf) if prf is not None else 1.0,
        "layout": _rope_layout(
            module_of_rope, head_dim, None if "all" in by_type else next(iter(by_type))
        ),
    }


def _rope_layout(rotary_module: Any, head_dim: int, layer_type: str | None = None) -> str | None:
    """``half`` or ``interleaved``: which dims the architecture's RoPE turns together, found by
    behaviour, or None when the probe cannot run.

    The head's basis vectors go through the architecture's own ``apply_rotary_pos_emb`` (of the
    rotary module's modeling module) with the cos/sin the model's own rotary module gives at
    position 1; a rotated dim ``j`` maps onto ``e_j`` and its partner.  Partners ``(i, i + r/2)``
    are ``half``, ``(2i, 2i + 1)`` ``interleaved`` (``r`` = the rotated width: only the first
    ``r`` dims turn under partial rotary; the rest must stay put).  The name of a helper function
    says nothing: Cohere's and GLM's ``rotate_half`` rotate adjacent pairs.
    """
    try:
        pairs = rope_pairs(rotary_module, head_dim, layer_type)
    except Exception:  # noqa: BLE001 - an architecture the probe cannot drive: layout unknown
        return None
    return layout_of_pairs(pairs, head_dim)


def rope_pairs(
    rotary_module: Any, head_dim: int, layer_type: str | None = None
) -> list[int | None]:
    """partner[j] of each dim j of a head under the architecture's own RoPE (None: unrotated).

    Raises when the modeling module has no ``apply_rotary_pos_emb`` or the probe does not fit it.
    """
    import torch

    fn = getattr(sys.modules.get(type(rotary_module).__module__), "apply_rotary_pos_emb", None)
    if fn is None:
        raise LookupError("no apply_rotary_pos_emb beside the rotary module")
    kwargs = {}
    if (
        layer_type is not None
        and "layer_type" in inspect.signature(rotary_module.forward).parameters
    ):
        kwargs["layer_type"] = layer_type
    with torch.no_grad():
        x = torch.zeros(1, 1, 1, head_dim, dtype=torch.float32)
        position = torch.ones(1, 1, dtype=torch.long)  # broadcast over the basis vectors
        cos, sin = rotary_module(x, position, **kwargs)
        cos, sin = cos.to(torch.float64), sin.to(torch.float64)
        failure: Exception | None = None
        # the whole head (the function splits off the unrotated dims itself), else the width
        # the cos covers (architectures that split before calling it: Phi, StableLM)
        for width in dict.fromkeys((head_dim, int(cos.shape[-1]))):
            basis = torch.eye(width, dtype=torch.float64).reshape(1, 1, width, width)
            try:
                q, _k = fn(basis, basis.clone(), cos, sin)
            except (RuntimeError, ValueError, IndexError, TypeError) as exc:
                failure = exc
                continue
            image = q.reshape(width, width).to(torch.float64).numpy()
            break
        else:
            raise failure or RuntimeError("no probe width fits")
    partner: list[int | None] = []
    for j in range(head_dim):
        if j >= image.shape[0]:
            partner.append(None)
            continue
        off = [k for k in range(image.shape[1]) if k != j and abs(image[j, k]) > 0]
        if len(off) > 1:
            raise ValueError(f"dim {j} turns with {len(off)} dims, not one")
        partner.append(off[0] if off else None)
    return partner


def layout_of_pairs(partner: list[int | None], head_dim: int) -> str | None:
    """``half`` / ``interleaved`` from each dim's partner (None: unrotated), or None when the
    pairs are neither (or the rotated dims are not the first ones)."""
    rotated = [j for j, p in enumerate(partner) if p is not None]
    r = len(rotated)
    if (
        not r
        or rotated != list(range(r))
        or any(partner[p] != j for j, p in enumerate(partner) if p is not None)
    ):
        return None
    if all(partner[i] == i + r // 2 for i in range(r // 2)):
        return "half"
    if all(partner[2 * i] == 2 * i + 1 for i in range(r // 2)):
        return "interleaved"
    return None


def _rope(cfg: Any) -> tuple[float | None, str | None]:
    params = getattr(cfg, "rope_parameters", None)
    if isinstance(params, dict) and params and all(isinstance(v, dict) for v in params.values()):
        params = params.get("full_attention") or next(iter(params.values()))  # per-layer-type RoPE
    if not isinstance(params, dict):
        params = dict(getattr(cfg, "rope_scaling", None) or {})
        if getattr(cfg, "rope_theta", None) is not None:
            params.setdefault("rope_theta", cfg.rope_theta)
    theta = params.get("rope_theta")
    rope_type = (
        params.get("rope_type") or params.get("type") or ("default" if theta is not None else None)
    )
    return (float(theta) if theta is not None else None), (str(rope_type) if rope_type else None)


@contextlib.contextmanager
def attention_hook(lm: Any, callback: AttentionCallback) -> Iterator[None]:
    """Route every attention call of ``lm`` through ``callback`` while the context is open.

    The callback sees (layer, query, key, sliding_window) of each call with query and key
    sequence lengths equal (self-attention; cross-attention calls are passed through untouched).
    Raises :class:`InputError` if the model does not dispatch attention through transformers'
    attention interface.
    """
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    if not getattr(lm, "_can_set_attn_implementation", lambda: True)():
        raise InputError(
            f"{lm.config.name_or_path}: this architecture does not use transformers' attention "
            "interface, so its attention inputs cannot be captured"
        )
    original = lm.config._attn_implementation or "eager"
    if original == HOOK_NAME:
        raise RuntimeError("attention hook already active on this model")
    if original != "eager" and original not in ALL_ATTENTION_FUNCTIONS:
        raise InputError(
            f"{lm.config.name_or_path}: attention implementation {original!r} cannot be hooked"
        )

    def delegate_for(module: Any) -> Callable:
        if original != "eager":
            return ALL_ATTENTION_FUNCTIONS[original]
        # eager attention is a function of each architecture's own modeling module
        eager = getattr(sys.modules.get(type(module).__module__), "eager_attention_forward", None)
        if eager is None:
            raise InputError(
                f"{lm.config.name_or_path}: no eager attention function to delegate to"
            )
        return eager

    def hooked(module, query, key, value, attention_mask, **kwargs):
        layer = getattr(module, "layer_idx", None)
        if layer is not None and query.shape[-2] == key.shape[-2]:
            if hasattr(callback, "layer_attention"):  # its scaling and soft-cap (exact attention)
                callback.layer_attention(int(layer), module, kwargs)
            callback(int(layer), query, key, kwargs.get("sliding_window"))
        return delegate_for(module)(module, query, key, value, attention_mask, **kwargs)

    AttentionInterface.register(HOOK_NAME, hooked)
    # the masks the original implementation would have been given
    AttentionMaskInterface.register(HOOK_NAME, ALL_MASK_ATTENTION_FUNCTIONS[original])
    lm.set_attn_implementation(HOOK_NAME)
    try:
        yield
    finally:
        lm.set_attn_implementation(original)
