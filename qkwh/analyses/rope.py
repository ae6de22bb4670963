"""RoPE frequency bands of one head (docs/metrics/rope.md). Stub: filled in by the next commits."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from qkwh.analyses.declared.rope import RopeParams
from qkwh.analyses.types import AnalysisResult, HeadData


def run(
    head: HeadData,
    params: RopeParams,
    *,
    seed: int,
    shared: Mapping[str, Any],
    uses: Mapping[str, Any],
) -> AnalysisResult:
    from qkwh.analyses import registry

    result = AnalysisResult()
    for table in registry.get("rope").tables:  # no rows yet
        result.add(table.name, {c.name: np.zeros(0) for c in table.columns})
    return result
