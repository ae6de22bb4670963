"""bench/guard.py's check: which figures count as worse than the accepted ones.

Only the comparison is tested (pure); the timings themselves are measured by
``bench/run.py --check``, never by tests.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def guard(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "bench"))
    import guard as mod

    yield mod
    sys.modules.pop("guard", None)


def _figures(guard, value: float = 2.0) -> dict:
    return {
        "figures": dict.fromkeys(guard.FIGURES, value),
        "settings": {
            "heads": 60,
            "rows": 8000,
            "workers": 2,
            "repeat": 2,
            "analyses": ["pca", "rotation", "plasticity", "reach"],
        },
    }


def test_a_figure_more_than_the_tolerance_worse_fails_by_name(guard):
    accepted = _figures(guard)
    new = copy.deepcopy(accepted)
    name = "no-op compute/python, CPU"
    new["figures"][name] = 2.0 * 1.2
    new["figures"]["compute/read, wall"] = 2.0 * 1.1  # within 15 %
    worse = guard.compare(new, accepted, tolerance=0.15)
    assert len(worse) == 1 and worse[0].startswith(name + ":")


def test_better_or_equal_figures_pass(guard):
    accepted = _figures(guard)
    new = copy.deepcopy(accepted)
    new["figures"]["compute/read, wall"] = 1.0
    assert guard.compare(new, accepted) == []
    assert guard.compare(accepted, accepted) == []


def test_figures_of_another_model_shape_are_not_compared(guard):
    accepted = _figures(guard)
    new = copy.deepcopy(accepted)
    new["settings"]["heads"] = 8
    (line,) = guard.compare(new, accepted)
    assert "--accept" in line


def test_accepted_figures_of_the_three_analyses_check_the_three(guard):
    """Accepted before the guard timed the default set (no ``analyses`` in the settings), the
    compute figures were the three analyses': they check this run's three, not the default set."""
    new = _figures(guard)
    accepted = copy.deepcopy(new)
    del accepted["settings"]["analyses"]
    for name in ("three/read, wall", "three/read, worker CPU"):
        del accepted["figures"][name]
    new["figures"]["compute/read, wall"] = 9.0  # the default set: nothing accepted to compare with
    assert guard.compare(new, accepted) == []
    new["figures"]["three/read, wall"] = 2.0 * 1.2
    (line,) = guard.compare(new, accepted)
    assert line.startswith("three/read, wall:")


def test_compute_figures_of_another_default_set_are_not_compared(guard):
    accepted = _figures(guard)
    new = copy.deepcopy(accepted)
    new["settings"]["analyses"] = ["pca", "rotation", "plasticity", "reach", "more"]
    new["figures"]["compute/read, worker CPU"] = 9.0
    assert guard.compare(new, accepted) == []
    new["figures"]["three/read, worker CPU"] = 9.0
    (line,) = guard.compare(new, accepted)
    assert line.startswith("three/read, worker CPU:")


def test_the_checked_in_accepted_figures_name_every_figure(guard):
    accepted = guard.load_accepted()
    if accepted is None:
        pytest.skip("no bench/accepted.json in this checkout")
    if "analyses" in accepted.get("settings", {}):
        assert set(accepted["figures"]) == set(guard.FIGURES)
    else:  # accepted before the default set was timed: every figure but the three's
        assert set(accepted["figures"]) | {"three/read, wall", "three/read, worker CPU"} == set(
            guard.FIGURES
        )
    assert all(v > 0 for v in accepted["figures"].values())
