"""Head ablation at the right place: the input of each attention output projection.

The attention of layer l concatenates its query heads' outputs, ``(..., n_q * head_dim)`` with
head h in columns ``h*head_dim : (h+1)*head_dim``, and mixes them in ``o_proj``.  A forward
pre-hook on ``o_proj`` replaces the selected heads' slices before the mixing (never after it,
where the heads are no longer separable): ``zero`` by 0, ``mean`` by the head's mean slice over
the run's unablated prompts.  Under GQA a query head is ablated alone; the key/value head it
shares is untouched.

torch is imported lazily (the ``capture`` extra).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import Any

from qkwh.errors import InputError

METHODS = ("zero", "mean")


def output_projections(lm: Any) -> dict[int, Any]:
    """{layer: its attention's output projection} (modules with ``layer_idx`` and ``o_proj``)."""
    found: dict[int, Any] = {}
    for _name, module in lm.named_modules():
        layer = getattr(module, "layer_idx", None)
        proj = getattr(module, "o_proj", None)
        if layer is not None and proj is not None and hasattr(proj, "register_forward_pre_hook"):
            found.setdefault(int(layer), proj)
    if not found:
        raise InputError(
            f"{getattr(lm.config, 'name_or_path', 'model')}: no attention output projection "
            "(o_proj) found, so its heads cannot be ablated"
        )
    return found


@contextlib.contextmanager
def ablated(
    lm: Any,
    heads: Iterable[tuple[int, int]],
    *,
    head_dim: int,
    means: dict[int, Any] | None = None,
) -> Iterator[None]:
    """Ablate ``heads`` = (layer, q_head) pairs while the context is open.

    ``means``: {layer: tensor (n_q, head_dim)} of mean slices (``mean`` method); None: zero.
    """
    by_layer: dict[int, list[int]] = {}
    for layer, h in heads:
        by_layer.setdefault(int(layer), []).append(int(h))
    projections = output_projections(lm)
    missing = sorted(set(by_layer) - set(projections))
    if missing:
        raise InputError(f"layers {missing} have no attention output projection to ablate")
    handles = []

    def make_hook(layer: int, qs: list[int]):
        def hook(module: Any, args: tuple) -> tuple:
            x = args[0]
            n_q = x.shape[-1] // head_dim
            y = x.clone().view(*x.shape[:-1], n_q, head_dim)
            if means is None:
                y[..., qs, :] = 0
            else:
                y[..., qs, :] = means[layer][qs].to(y.dtype)
            return (y.view(x.shape), *args[1:])

        return hook

    try:
        for layer, qs in by_layer.items():
            handles.append(projections[layer].register_forward_pre_hook(make_hook(layer, qs)))
        yield
    finally:
        for h in handles:
            h.remove()


class MeanRecorder:
    """Accumulates each layer's o_proj input over tokens (float64) while :meth:`recording`.

    :meth:`means` gives {layer: (n_q, head_dim) tensor}: the mean over every token of every
    prompt recorded, the ``mean`` method's replacement.
    """

    def __init__(self, lm: Any, head_dim: int):
        self.lm = lm
        self.head_dim = head_dim
        self.sums: dict[int, Any] = {}
        self.count = 0

    @contextlib.contextmanager
    def recording(self) -> Iterator[None]:
        handles = []
        seen: dict[str, int] = {"tokens": 0}

        def make_hook(layer: int):
            def hook(module: Any, args: tuple) -> None:
                x = args[0].detach().double()
                flat = x.reshape(-1, x.shape[-1])
                s = flat.sum(0)
                self.sums[layer] = self.sums[layer] + s if layer in self.sums else s
                seen["tokens"] = flat.shape[0]

            return hook

        try:
            for layer, proj in output_projections(self.lm).items():
                handles.append(proj.register_forward_pre_hook(make_hook(layer)))
            yield
        finally:
            for h in handles:
                h.remove()
            self.count += seen["tokens"]

    def means(self) -> dict[int, Any]:
        if not self.count:
            raise RuntimeError("no prompt recorded")
        return {
            layer: (s / self.count).float().view(-1, self.head_dim)
            for layer, s in self.sums.items()
        }
