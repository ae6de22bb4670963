"""Which heads are ablated: the k lowest/highest of the metric (ties by layer, then head), random
controls from the computed heads reproducible by seed, and the metric validated."""

from __future__ import annotations

import duckdb
import pytest

from qkwh.ablate.selection import head_scores, random_order, ranked, selections
from qkwh.errors import InputError, NotFoundError


@pytest.fixture
def con():
    c = duckdb.connect()
    c.execute(
        "CREATE TABLE head_metrics (model_id VARCHAR, layer INTEGER, q_head INTEGER, "
        "k_head INTEGER, taxonomy VARCHAR, ap_overall DOUBLE, bias_strength DOUBLE, "
        "n_active_pairs INTEGER, config_id_rotation VARCHAR)"
    )
    rows = [  # (layer, q_head, ap_overall): ties at 0.2 across layers and heads, one NULL
        (2, 1, 0.2),
        (0, 3, 0.5),
        (1, 0, 0.2),
        (0, 1, 0.2),
        (3, 2, 0.9),
        (1, 2, None),
        (2, 0, 0.1),
    ]
    for layer, h, v in rows:
        c.execute(
            "INSERT INTO head_metrics VALUES ('m', ?, ?, 0, 'x', ?, ?, ?, 'r1')",
            [layer, h, v, None if v is None else 1 - v, layer],
        )
    c.execute("INSERT INTO head_metrics VALUES ('other', 0, 0, 0, 'x', 0.0, 0.0, 0, 'r2')")
    return c


def test_lowest_and_highest_break_ties_by_layer_then_head(con):
    s = head_scores(con, "m", "ap_overall")
    assert s.heads == ((0, 1), (0, 3), (1, 0), (2, 0), (2, 1), (3, 2))  # the NULL head is out
    assert ranked(s, "lowest") == [(2, 0), (0, 1), (1, 0), (2, 1), (0, 3), (3, 2)]
    assert ranked(s, "highest") == [(3, 2), (0, 3), (0, 1), (1, 0), (2, 1), (2, 0)]
    assert s.configs == {"config_id_rotation": ["r1"]}
    plan = selections(s, "lowest", (1, 3), (0, 1))
    assert plan[0] == ("none", 0, ())
    assert [(p[0], p[1]) for p in plan] == [
        ("none", 0),
        ("ap_overall", 1),
        ("random:0", 1),
        ("random:1", 1),
        ("ap_overall", 3),
        ("random:0", 3),
        ("random:1", 3),
    ]
    assert plan[1][2] == ((2, 0),)
    assert plan[4][2] == ((2, 0), (0, 1), (1, 0))


def test_an_integer_column_ranks_too(con):
    s = head_scores(con, "m", "n_active_pairs")
    assert ranked(s, "highest")[:2] == [(3, 2), (2, 0)]


def test_random_selections_come_from_computed_heads_and_repeat_by_seed(con):
    s = head_scores(con, "m", "ap_overall")
    a = random_order(s.heads, 5)
    assert sorted(a) == sorted(s.heads)  # a permutation of the computed heads only
    assert random_order(s.heads, 5) == a
    assert random_order(tuple(reversed(s.heads)), 5) == a  # independent of the input order
    assert any(random_order(s.heads, seed) != a for seed in range(6))
    plan = selections(s, "lowest", (2, 4), (5,))
    r2, r4 = plan[2][2], plan[4][2]
    assert r4[:2] == r2 and r4 == tuple(a[:4])  # nested across k


def test_unknown_metric_lists_the_metrics_and_suggests(con):
    with pytest.raises(InputError) as e:
        head_scores(con, "m", "ap_overal")
    msg = str(e.value)
    assert "did you mean 'ap_overall'" in msg
    assert "available: ap_overall, bias_strength, n_active_pairs" in msg
    with pytest.raises(InputError):  # a text column is no metric
        head_scores(con, "m", "taxonomy")
    with pytest.raises(InputError):  # nor the head key
        head_scores(con, "m", "layer")


def test_k_beyond_the_computed_heads_and_missing_model_are_refused(con):
    s = head_scores(con, "m", "ap_overall")
    with pytest.raises(InputError, match="more than the 6 heads"):
        selections(s, "lowest", (2, 7), ())
    with pytest.raises(NotFoundError):
        head_scores(con, "nobody", "ap_overall")
    c = duckdb.connect()
    with pytest.raises(NotFoundError, match="qkwh build"):
        head_scores(c, "m", "ap_overall")


def test_both_models_pairs_the_metric_selections_of_two_models():
    from qkwh.ablate.effects import both_models

    c = duckdb.connect()
    assert both_models(c, "a", "b") == []  # no mart: no section
    c.execute(
        "CREATE TABLE ablation_effects (model_id VARCHAR, run_id VARCHAR, metric VARCHAR, "
        "rank_order VARCHAR, method VARCHAR, selection_kind VARCHAR, k INTEGER, length INTEGER, "
        "mean_logprob DOUBLE, accuracy DOUBLE, diff_random_logprob DOUBLE, distinguishable BOOLEAN)"
    )
    for model, run, lp in (("a", "ra", -1.0), ("b", "rb", -2.0)):
        for k in (2, 4):
            c.execute(
                "INSERT INTO ablation_effects VALUES (?, ?, 'm', 'lowest', 'mean', 'metric', ?, "
                "512, ?, 0.5, -0.1, true)",
                [model, run, k, lp - k],
            )
        c.execute(  # random and none rows, and a setting only one model has, stay out
            "INSERT INTO ablation_effects VALUES (?, ?, 'm', 'lowest', 'mean', 'random', 2, 512, "
            "0, 0, NULL, NULL)",
            [model, run],
        )
    c.execute(
        "INSERT INTO ablation_effects VALUES ('a', 'ra', 'm', 'lowest', 'zero', 'metric', 2, 512,"
        " 0, 0, 0, false)"
    )
    rows = both_models(c, "a", "b")
    assert [(r["k"], r["mean_logprob_a"], r["mean_logprob_b"]) for r in rows] == [
        (2, -3.0, -4.0),
        (4, -5.0, -6.0),
    ]
    assert rows[0]["run_id_a"] == "ra" and rows[0]["run_id_b"] == "rb"
