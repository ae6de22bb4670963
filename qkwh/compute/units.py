"""Units of work: one head = (model_id, layer, q_head) with its q file and mapped k file.

Heads that share a k file (a GQA group in one layer) travel together as a :class:`GroupTask`,
so each k file is read once per (layer, KV head).  Which analyses a head still needs comes from
``head_runs``: a head whose config_id and input fingerprint are unchanged is skipped.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

import qkwh
from qkwh.analyses import registry
from qkwh.analyses.precompute import code_files
from qkwh.analyses.registry import Analysis
from qkwh.analyses.types import AttentionFacts, RopePlanes
from qkwh.params import RunConfig


def _package_code() -> tuple[Path, ...]:
    """The package's analysis code: params, every module of qkwh/analyses (the declarations and
    the registry and the shared precomputations among them) and the per-head work."""
    root = Path(qkwh.__file__).resolve().parent
    return (
        root / "params.py",
        *sorted((root / "analyses").rglob("*.py")),
        root / "rope_config.py",  # the rope analysis's planes and bands
        root / "compute" / "work.py",
    )


def code_version(analysis: str | None = None) -> str:
    """Package version plus a hash of the analysis code: changing an analysis recomputes.

    With ``analysis``, the source files of a registered analysis that live outside the package
    (its function's module and its declared ``code`` files) are hashed too.
    """
    root = Path(qkwh.__file__).resolve().parent
    files = list(_package_code())
    if analysis is not None:
        files += [p for p in code_files(registry.get(analysis)) if p not in files]
    h = hashlib.sha256()
    for p in files:
        if p.exists():
            rel = p.relative_to(root).as_posix() if p.is_relative_to(root) else p.name
            h.update(rel.encode() + b"\0" + p.read_bytes())
    return f"{qkwh.__version__}+{h.hexdigest()[:10]}"


@dataclass(frozen=True)
class HeadUnit:
    model_id: str
    layer: int
    q_head: int
    k_head: int
    q_path: str
    k_path: str
    q_fingerprint: str
    k_fingerprint: str
    context_length: int
    bucket_size: int
    sliding_window: int | None

    @property
    def key(self) -> tuple[str, int, int]:
        return (self.model_id, self.layer, self.q_head)

    @property
    def label(self) -> str:
        return f"{self.model_id} L{self.layer}H{self.q_head}"

    def input_fingerprint(self) -> str:
        text = "|".join(
            map(
                str,
                (
                    self.q_fingerprint,
                    self.k_fingerprint,
                    self.context_length,
                    self.bucket_size,
                    self.sliding_window,
                    self.k_head,
                ),
            )
        )
        return hashlib.sha256(text.encode()).hexdigest()[:24]


@dataclass(frozen=True)
class GroupTask:
    """Heads of one (model, layer, k_head): the k file is read once for all of them."""

    heads: tuple[HeadUnit, ...]
    analyses: tuple[tuple[str, ...], ...]  # per head: the analyses to run
    config: RunConfig = field(default_factory=RunConfig)
    # the declarations of those analyses, carried along so a worker process runs what the
    # parent registered (an analysis registered at run time included)
    declarations: tuple[Analysis, ...] = ()
    config_ids: tuple[
        tuple[str, str], ...
    ] = ()  # (analysis, config_id): results leave as keyed Arrow
    rope: RopePlanes | None = None  # the RoPE planes of the group's layer (rope_frequencies)
    attention: AttentionFacts | None = None  # the model's sampler facts (reach)

    @property
    def n_heads(self) -> int:
        return len(self.heads)

    def one_head(self, i: int) -> GroupTask:
        """The task of head ``i`` alone (it reads the k file again)."""
        return replace(self, heads=(self.heads[i],), analyses=(self.analyses[i],))


def plan(
    units: list[HeadUnit],
    done: dict[tuple[str, int, int, str, str], str],
    analyses: tuple[str, ...],
    config_ids: dict[str, str],
    config: RunConfig,
    *,
    force: bool = False,
    rope: Mapping[tuple[str, int], RopePlanes] | None = None,
    left_out: Mapping[str, Collection[str]] | None = None,
    attention: Mapping[str, AttentionFacts] | None = None,
) -> list[GroupTask]:
    """Group heads by k file, keeping only the (head, analysis) pairs that need computing.

    ``done`` maps (model_id, layer, q_head, analysis, config_id) to the input fingerprint its
    rows were computed from (head_runs): a head is skipped for an analysis when this run's set
    has rows computed from the same inputs.  ``rope``: (model_id, layer) -> the layer's RoPE
    planes, carried by the group's task; ``left_out``: model_id -> analyses not run for it.
    """
    rope = rope or {}
    left_out = left_out or {}
    groups: dict[tuple[str, int, int], list[tuple[HeadUnit, tuple[str, ...]]]] = {}
    for u in units:
        fp = u.input_fingerprint()
        skip = left_out.get(u.model_id, ())
        need = tuple(
            a
            for a in analyses
            if a not in skip and (force or done.get((*u.key, a, config_ids[a])) != fp)
        )
        if need:
            groups.setdefault((u.model_id, u.layer, u.k_head), []).append((u, need))
    declarations = tuple(registry.get(a) for a in analyses)
    ids = tuple(sorted(config_ids.items()))
    return [
        GroupTask(
            tuple(u for u, _ in g),
            tuple(n for _, n in g),
            config,
            declarations,
            ids,
            rope.get((model_id, layer)),
            (attention or {}).get(model_id),
        )
        for (model_id, layer, _), g in groups.items()
    ]


def balance_tail(tasks: list[GroupTask], workers: int) -> list[GroupTask]:
    """``tasks`` in the order to hand them to ``workers`` workers: the largest first, and the
    last ``workers`` of them split into one task per head.

    A worker takes the next task when it is free, so the run ends with its last task: were that a
    whole GQA group, one worker could still be busy with several heads while the others have
    nothing left.  One-head tasks at the end keep that idle tail within about one head; each costs
    one more read of its k file and of the key precomputations.  The results do not depend on the
    order or the split (every head is computed from its own rows alone).
    """
    if workers <= 1 or len(tasks) <= workers:
        return tasks
    ordered = sorted(tasks, key=lambda t: t.n_heads, reverse=True)  # stable: plan order otherwise
    whole, tail = ordered[:-workers], ordered[-workers:]
    return whole + [t.one_head(i) for t in tail for i in range(t.n_heads)]
