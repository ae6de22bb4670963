-- Least-squares line of benchmark score on model metric (the fitted line of the report's
-- metric-vs-benchmark figures), per benchmark score group of benchmark_joins: over the models
-- with both a finite score and a finite metric value, in model_id order (macro ols_line).  The
-- correlations with intervals over the same observations are in benchmark_correlations.
with obs as (
    select benchmark, mode, length_scope, context_length_tokens, metric, model_id, score, metric_value
    from {{ ref('benchmark_joins') }}
    where isfinite(score) and isfinite(metric_value)
),

groups as (
    select
        benchmark,
        mode,
        length_scope,
        context_length_tokens,
        metric,
        list(metric_value order by model_id) as xs,
        list(score order by model_id) as ys
    from obs
    group by benchmark, mode, length_scope, context_length_tokens, metric
),

centred as (
    select *, {{ ols_means('xs', 'ys') }}
    from groups
)

select
    benchmark,
    mode,
    length_scope,
    context_length_tokens,
    metric,
    {{ ols_line('xs', 'ys') }}
from centred
-- a stable row order for readers that select without ORDER BY
order by benchmark, mode, length_scope, context_length_tokens, metric
