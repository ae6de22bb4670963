-- Model-level plasticity (docs/metrics/aggregation.md#model-plasticity-profile) for both estimators: decile_k = unweighted mean over
-- heads with a value for that decile, ap_overall = mean of head ap_overall, quintiles, first /
-- last 20 %, drop and the NoPE-study decile means from the model deciles, and the gaps
-- Gaussian minus empirical.  The values are replicate 0 of int_model_metric_replicates (the
-- one implementation of these aggregates, shared with their intervals); the head counts are
-- counted here.
{%- set metrics = metrics_of_group('plasticity') + metrics_of_group('gauss_gap') %}
with heads as (
    select * from {{ ref('int_head_plasticity') }}
),

counts as (
    select
        model_id,
        count(*) filter (where estimator = 'gaussian') as n_heads_plasticity,
        count(*) filter (where estimator = 'empirical' and ap_overall is not null) as n_heads_empirical,
        {%- for k in range(10) %}
        count(decile_{{ k }}) filter (where estimator = 'gaussian') as n_heads_decile_{{ k }}{{ ',' if not loop.last }}
        {%- endfor %}
    from heads
    group by model_id
),

point as (
    {{ point_estimates(metrics) }}
)

select c.*, p.* exclude (model_id)
from counts as c
left join point as p using (model_id)
