-- Model-level PCA summary (docs/metrics/aggregation.md#rotation-and-pca-summaries): per-pc means of explained variance and canonicalised
-- correlations over heads, head-level PCA means and taxonomy fractions are replicate 0 of
-- int_model_metric_replicates (shared with their intervals).  Counted and described here: heads
-- with PCA and the spread (sd) of the PC0 statistics the training-trajectory figures plot.
{%- set metrics = metrics_of_group('pca') + metrics_of_group('taxonomy') %}
with heads as (
    select * from {{ ref('head_metrics') }} where has_pca
),

counts as (
    select
        model_id,
        count(*) as n_heads_pca,
        stddev_samp(r_q0) as r_q0_sd,
        stddev_samp(r_k0) as r_k0_sd,
        stddev_samp(ev0) as ev0_sd
    from heads
    group by model_id
),

point as (
    {{ point_estimates(metrics) }}
)

select
    c.*,
    p.* exclude (model_id),
    -- the trajectory figures' mean +- sd of PC0: the means are the per-pc means of PC0
    p.r_q_0 as r_q0_mean,
    p.r_k_0 as r_k0_mean,
    p.ev_0 as ev0_mean
from counts as c
left join point as p using (model_id)
