-- Every pair of models (model_a < model_b) for each metric of comparison_metrics() (the declared compared metrics,
-- or the dbt var comparison_metrics when set):
-- difference = estimate(a) - estimate(b) and its bootstrap interval from replicate b of a minus
-- replicate b of b (the two models' layer draws are independent streams).  distinguishable =
-- the interval excludes 0; NULL when either model has no interval for the metric.
-- When either model has a document-group jackknife (model_metric_ci.se_documents), the interval
-- shown is the combined one, difference -/+ z * sqrt(se^2 + se_documents_a^2 + se_documents_b^2)
-- (`interval` = 'layers+documents'); else the percentile interval ('layers').
{%- set level = var('ci_level') %}
{%- set z = normal_z(level) %}
{%- set metrics = comparison_metrics() %}
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
        a.se_documents as se_documents_a,
        b.se_documents as se_documents_b,
        (a.ci_low is not null and b.ci_low is not null) as both_have_intervals
    from ci as a
    join ci as b on b.metric = a.metric and a.model_id < b.model_id
),

reps as (
    select * from {{ ref('int_model_metric_replicates') }}
    where replicate > 0
      and metric in ({% for m in metrics %}'{{ m }}'{{ ', ' if not loop.last }}{% endfor %})
),

rep_lists as (
    -- each model's replicates of a metric as one list in replicate order
    select
        model_id,
        metric,
        list(value order by replicate) as vals,
        list(replicate order by replicate) as replicates
    from reps
    group by model_id, metric
),

matched as (
    select
        p.metric,
        p.model_a,
        p.model_b,
        ra.vals as vals_a,
        rb.vals as vals_b,
        ra.replicates = rb.replicates as aligned
    from pairs as p
    join rep_lists as ra on ra.model_id = p.model_a and ra.metric = p.metric
    join rep_lists as rb on rb.model_id = p.model_b and rb.metric = p.metric
    where p.both_have_intervals
),

diffs as (
    -- replicate b of a minus replicate b of b, in replicate order: element by element when both
    -- models hold the same replicates (the usual case), else over the replicates both hold
    select metric, model_a, model_b, list_transform(list_zip(vals_a, vals_b), lambda z: z[1] - z[2]) as diffs
    from matched
    where aligned

    union all

    select
        m.metric,
        m.model_a,
        m.model_b,
        list(ra.value - rb.value order by ra.replicate) as diffs
    from matched as m
    join reps as ra on ra.model_id = m.model_a and ra.metric = m.metric
    join reps as rb on rb.model_id = m.model_b and rb.metric = m.metric and rb.replicate = ra.replicate
    where not m.aligned
    group by m.metric, m.model_a, m.model_b
),

boot as (
    -- both percentiles from one quantile_cont over the list; se over it in replicate order
    select metric, model_a, model_b, q[1] as ci_low, q[2] as ci_high, se, n_boot_valid
    from (
        select
            metric,
            model_a,
            model_b,
            list_aggregate(diffs, 'quantile_cont', [{{ 0.5 - level / 2 }}, {{ 0.5 + level / 2 }}]) as q,
            list_aggregate(diffs, 'stddev_samp') as se,
            list_aggregate(diffs, 'count') as n_boot_valid
        from diffs
    )
),

shown as (
    select
        p.*,
        b.se,
        b.n_boot_valid,
        case
            when b.ci_low is null then null
            when p.se_documents_a is null and p.se_documents_b is null then 'layers'
            else 'layers+documents'
        end as "interval",
        sqrt(b.se * b.se + coalesce(p.se_documents_a, 0) ^ 2 + coalesce(p.se_documents_b, 0) ^ 2)
            as se_combined,
        b.ci_low as q_low,
        b.ci_high as q_high
    from pairs as p
    left join boot as b using (metric, model_a, model_b)
),

bounds as (
    select
        *,
        case when "interval" = 'layers+documents'
             then (estimate_a - estimate_b) - {{ z }} * se_combined else q_low end as ci_low,
        case when "interval" = 'layers+documents'
             then (estimate_a - estimate_b) + {{ z }} * se_combined else q_high end as ci_high
    from shown
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
    p.ci_low,
    p.ci_high,
    p.se,
    p.se_documents_a,
    p.se_documents_b,
    p."interval",
    case when p.ci_low is not null then p.ci_low > 0 or p.ci_high < 0 end as distinguishable,
    coalesce(p.n_boot_valid, 0) as n_boot_valid,
    {{ var('n_boot') }} as n_boot,
    cast({{ level }} as double) as level,
    {{ var('boot_seed') }} as seed,
    'layer_cluster_bootstrap_percentile_difference' as method,
    case
        when not p.both_have_intervals then 'a model has no interval for this metric (too few layers)'
        when (p.se_documents_a is null) <> (p.se_documents_b is null)
            then 'only ' || case when p.se_documents_a is null then p.model_b else p.model_a end
                 || ' has a document jackknife; the other''s document noise is not counted'
    end as note
from bounds as p
-- a stable row order for readers that select without ORDER BY
order by model_a, model_b, metric
