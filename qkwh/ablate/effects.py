"""Ablation effects of two models side by side, for ``qkwh compare A B`` (read from the mart
``ablation_effects``; nothing is computed here)."""

from __future__ import annotations

from typing import Any

#: the columns of one side of a comparison row
SIDE = ("mean_logprob", "accuracy", "diff_random_logprob", "distinguishable", "run_id")


def both_models(con: Any, model_a: str, model_b: str) -> list[dict[str, Any]]:
    """One row per (metric, rank_order, method, k, length) where both models have a run: each
    model's metric-selection effect (``*_a``, ``*_b``).  Empty when the mart is missing or the
    models share no such setting (the compare section is then left out)."""
    have = con.execute(
        "SELECT 1 FROM information_schema.tables WHERE table_schema = 'main' "
        "AND table_name = 'ablation_effects'"
    ).fetchone()
    if not have:
        return []
    side = ", ".join(f"{{t}}.{c} AS {c}_{{s}}" for c in SIDE)
    sql = f"""
        SELECT a.metric, a.rank_order, a.method, a.k, a.length,
               {side.format(t="a", s="a")}, {side.format(t="b", s="b")}
        FROM ablation_effects a
        JOIN ablation_effects b
          ON a.metric = b.metric AND a.rank_order = b.rank_order AND a.method = b.method
         AND a.k = b.k AND a.length = b.length
        WHERE a.model_id = ? AND b.model_id = ?
          AND a.selection_kind = 'metric' AND b.selection_kind = 'metric'
        ORDER BY a.metric, a.rank_order, a.method, a.length, a.k, a.run_id, b.run_id
    """
    cur = con.execute(sql, [model_a, model_b])
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r)) for r in cur.fetchall()]
