-- Every pair of models (model_a < model_b) for each metric of var('comparison_metrics'):
-- difference = estimate(a) - estimate(b) and its bootstrap interval from replicate b of a minus
-- replicate b of b (the two models' layer draws are independent streams).  distinguishable =
-- the interval excludes 0; NULL when either model has no interval for the metric.
{%- set level = var('ci_level') %}
{%- set metrics = var('comparison_metrics') %}
with ci as (
    select * from {{ ref('model_metric_ci') }}
    where metric in ({% for m in metrics %}'{{ m }}'{{ ', ' if not loop.last }}{% endfor %})
),

pairs as (
    select
        a.metric,
        a.metric_group,
        a.model_id as model_a,
        b.model_id as model_b,
        a.label as label_a,
        b.label as label_b,
        a.estimate as estimate_a,
        b.estimate as estimate_b,
        (a.ci_low is not null and b.ci_low is not null) as both_have_intervals
    from ci as a
    join ci as b on b.metric = a.metric and a.model_id < b.model_id
),

reps as (
    select * from {{ ref('int_model_metric_replicates') }}
    where replicate > 0
      and metric in ({% for m in metrics %}'{{ m }}'{{ ', ' if not loop.last }}{% endfor %})
),

diffs as (
    select
        p.metric,
        p.model_a,
        p.model_b,
        ra.replicate,
        ra.value - rb.value as diff
    from pairs as p
    join reps as ra on ra.model_id = p.model_a and ra.metric = p.metric
    join reps as rb on rb.model_id = p.model_b and rb.metric = p.metric and rb.replicate = ra.replicate
    where p.both_have_intervals
),

boot as (
    select
        metric,
        model_a,
        model_b,
        quantile_cont(diff, {{ 0.5 - level / 2 }}) as ci_low,
        quantile_cont(diff, {{ 0.5 + level / 2 }}) as ci_high,
        list_aggregate(list(diff order by replicate), 'stddev_samp') as se,
        count(diff) as n_boot_valid
    from diffs
    group by metric, model_a, model_b
)

select
    p.model_a,
    p.model_b,
    p.label_a,
    p.label_b,
    p.metric,
    p.metric_group,
    p.estimate_a,
    p.estimate_b,
    p.estimate_a - p.estimate_b as difference,
    b.ci_low,
    b.ci_high,
    b.se,
    case when b.ci_low is not null then b.ci_low > 0 or b.ci_high < 0 end as distinguishable,
    coalesce(b.n_boot_valid, 0) as n_boot_valid,
    {{ var('n_boot') }} as n_boot,
    cast({{ level }} as double) as level,
    {{ var('boot_seed') }} as seed,
    'layer_cluster_bootstrap_percentile_difference' as method,
    case when not p.both_have_intervals then 'a model has no interval for this metric (too few layers)' end as note
from pairs as p
left join boot as b using (metric, model_a, model_b)
