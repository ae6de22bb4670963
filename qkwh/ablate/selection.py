"""Which heads an ablation knocks out: the k lowest (highest) of a head_metrics column, and the
random controls drawn from the same computed heads.

The metric is read from the mart ``head_metrics`` (built by ``qkwh build``), which carries each
model's heads under its current parameter set.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from qkwh.errors import InputError, NotFoundError, did_you_mean

ORDERS = ("lowest", "highest")
#: numeric columns of head_metrics that identify a head rather than measure it
NOT_METRICS = ("layer", "q_head", "k_head")
_NUMERIC = (
    "DOUBLE",
    "FLOAT",
    "REAL",
    "DECIMAL",
    "INTEGER",
    "BIGINT",
    "SMALLINT",
    "TINYINT",
    "HUGEINT",
    "UBIGINT",
    "UINTEGER",
    "USMALLINT",
    "UTINYINT",
)

Head = tuple[int, int]  # (layer, q_head)


@dataclass(frozen=True)
class HeadScores:
    """The computed heads of one model with one metric's value each, and the metric's
    parameter sets (head_metrics' ``config_id_*`` columns)."""

    model_id: str
    metric: str
    heads: tuple[Head, ...]  # sorted by (layer, q_head)
    values: tuple[float, ...]
    configs: dict[str, list[str]]

    def configs_json(self) -> str:
        return json.dumps(self.configs, sort_keys=True)


def numeric_metrics(con: Any) -> list[str]:
    """The numeric columns of head_metrics, in table order (the head key left out)."""
    rows = con.execute(
        "SELECT column_name, data_type FROM information_schema.columns "
        "WHERE table_schema = 'main' AND table_name = 'head_metrics' ORDER BY ordinal_position"
    ).fetchall()
    if not rows:
        raise NotFoundError(
            "the warehouse has no head_metrics mart: run `qkwh compute` and `qkwh build` first"
        )
    return [
        name
        for name, dtype in rows
        if name not in NOT_METRICS and str(dtype).split("(")[0].upper() in _NUMERIC
    ]


def head_scores(con: Any, model_id: str, metric: str) -> HeadScores:
    """The heads of ``model_id`` with a value of ``metric`` in head_metrics.

    InputError naming the available metrics (and the closest one) when ``metric`` is not a
    numeric column of head_metrics; NotFoundError when the model has no computed heads.
    """
    metrics = numeric_metrics(con)
    if metric not in metrics:
        raise InputError(
            f"--rank-by {metric!r} is not a numeric column of head_metrics"
            f"{did_you_mean(metric, metrics)}; available: {', '.join(metrics)}"
        )
    config_cols = [
        r[0]
        for r in con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = 'main' "
            "AND table_name = 'head_metrics' AND column_name LIKE 'config_id_%' "
            "ORDER BY ordinal_position"
        ).fetchall()
    ]
    q = '"' + metric.replace('"', '""') + '"'
    rows = con.execute(
        f"SELECT layer, q_head, CAST({q} AS DOUBLE) FROM head_metrics "
        f"WHERE model_id = ? AND {q} IS NOT NULL AND NOT isnan(CAST({q} AS DOUBLE)) "
        "ORDER BY layer, q_head",
        [model_id],
    ).fetchall()
    if not rows:
        raise NotFoundError(
            f"model {model_id!r} has no head with a value of {metric} in head_metrics: "
            f"run `qkwh compute --model {model_id}` and `qkwh build` first"
        )
    configs: dict[str, list[str]] = {}
    for c in config_cols:
        cq = '"' + c.replace('"', '""') + '"'
        vals = con.execute(
            f"SELECT DISTINCT {cq} FROM head_metrics WHERE model_id = ? AND {cq} IS NOT NULL "
            "ORDER BY 1",
            [model_id],
        ).fetchall()
        configs[c] = [str(v[0]) for v in vals]
    return HeadScores(
        model_id=model_id,
        metric=metric,
        heads=tuple((int(r[0]), int(r[1])) for r in rows),
        values=tuple(float(r[2]) for r in rows),
        configs=configs,
    )


def ranked(scores: HeadScores, order: str) -> list[Head]:
    """Every head by ``order`` of the metric (lowest or highest first); ties by layer, then head."""
    if order not in ORDERS:
        raise InputError(f"--order must be lowest or highest, not {order!r}")
    sign = 1.0 if order == "lowest" else -1.0
    idx = sorted(
        range(len(scores.heads)),
        key=lambda i: (sign * scores.values[i], scores.heads[i][0], scores.heads[i][1]),
    )
    return [scores.heads[i] for i in idx]


def random_order(heads: tuple[Head, ...], seed: int) -> list[Head]:
    """The computed heads in a random order drawn with ``seed`` (the first k are the random
    selection of size k, so the selections of one seed are nested)."""
    base = sorted(heads)
    perm = np.random.default_rng(seed).permutation(len(base))
    return [base[int(i)] for i in perm]


def selections(
    scores: HeadScores, order: str, ks: tuple[int, ...], seeds: tuple[int, ...]
) -> list[tuple[str, int, tuple[Head, ...]]]:
    """(selection, k, heads) of a run: ``none`` (k = 0), then for every k the metric's k heads
    and each ``random:<seed>``'s."""
    n = len(scores.heads)
    too_many = [k for k in ks if k > n]
    if too_many:
        raise InputError(
            f"--k {max(too_many)} is more than the {n} heads of {scores.model_id} with "
            f"{scores.metric} computed"
        )
    if any(k < 1 for k in ks):
        raise InputError("--k values must be at least 1")
    top = ranked(scores, order)
    perms = {s: random_order(scores.heads, s) for s in seeds}
    out: list[tuple[str, int, tuple[Head, ...]]] = [("none", 0, ())]
    for k in ks:  # k by k, so a run stopped early already has comparable selections
        out.append((scores.metric, k, tuple(top[:k])))
        out += [(f"random:{s}", k, tuple(perms[s][:k])) for s in seeds]
    return out
