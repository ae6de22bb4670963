-- Model-level planar-rotation summary (docs/metrics/aggregation.md#rotation-and-pca-summaries): means over heads (|x| columns are means
-- of per-head absolute values), bias medians / fractions and max residual_pos_r are replicate 0
-- of int_model_metric_replicates (shared with their intervals).  Counted here: heads and
-- degenerate heads; described here: median + IQR of the four quantities the SmolLM3 trajectory
-- figure shows.  Degenerate heads carry NULL metrics and drop out.
{%- set metrics = metrics_of_group('rotation') %}
with heads as (
    select * from {{ ref('head_metrics') }} where has_rotation
),

counts as (
    select
        model_id,
        count(*) as n_heads_rotation,
        count(*) filter (where degenerate) as n_degenerate,
        {%- for c in ['abs_r_k_a', 'separation_strength', 'bias_strength', 'plane_var_fraction'] %}
        quantile_cont({{ c }}, 0.25) as {{ c }}_q25,
        quantile_cont({{ c }}, 0.5) as {{ c }}_q50,
        quantile_cont({{ c }}, 0.75) as {{ c }}_q75{{ ',' if not loop.last }}
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
