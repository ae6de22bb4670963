-- `qkwh compare A B`: the comparison rows of one pair, oriented as A - B whichever order the mart
-- stores them in, with each model's own interval from model_metric_ci (the combined one where
-- the model has a document jackknife).  {comparisons} is model_comparisons (two models) or
-- dataset_comparisons (two captures of one model on different datasets: heads both hold,
-- paired layer draws); both store estimate_a - estimate_b of model_a < model_b.
-- $1 = model A, $2 = model B, $3 = metric names (VARCHAR[]) or NULL for every compared metric.
WITH pair AS (
    SELECT
        metric,
        model_a = $1 AS as_stored,
        estimate_a, estimate_b, difference, ci_low, ci_high, distinguishable, "interval",
        n_boot, level, seed, note
    FROM {comparisons}
    WHERE (model_a = $1 AND model_b = $2) OR (model_a = $2 AND model_b = $1)
)
SELECT
    p.metric,
    $1 AS model_a,
    $2 AS model_b,
    a.label AS label_a,
    b.label AS label_b,
    CASE WHEN p.as_stored THEN p.estimate_a ELSE p.estimate_b END AS estimate_a,
    coalesce(a.ci_low_combined, a.ci_low) AS ci_low_a,
    coalesce(a.ci_high_combined, a.ci_high) AS ci_high_a,
    CASE WHEN p.as_stored THEN p.estimate_b ELSE p.estimate_a END AS estimate_b,
    coalesce(b.ci_low_combined, b.ci_low) AS ci_low_b,
    coalesce(b.ci_high_combined, b.ci_high) AS ci_high_b,
    CASE WHEN p.as_stored THEN p.difference ELSE -p.difference END AS difference,
    CASE WHEN p.as_stored THEN p.ci_low ELSE -p.ci_high END AS ci_low,
    CASE WHEN p.as_stored THEN p.ci_high ELSE -p.ci_low END AS ci_high,
    p.distinguishable,
    p."interval",
    '{comparisons}' = 'dataset_comparisons' AS paired,
    p.level,
    p.n_boot,
    p.seed,
    p.note
FROM pair AS p
LEFT JOIN model_metric_ci AS a ON a.model_id = $1 AND a.metric = p.metric
LEFT JOIN model_metric_ci AS b ON b.model_id = $2 AND b.metric = p.metric
WHERE $3 IS NULL OR list_contains($3, p.metric)
ORDER BY p.metric
