-- One row per (model, metric) for every model-level metric of model_summary that aggregates
-- heads (plasticity of both estimators, gauss gaps, rotation, PCA, taxonomy fractions, RoPE
-- band plasticity): the
-- estimate and its layer-cluster bootstrap interval.  The estimate is replicate 0 of
-- int_model_metric_replicates (the value model_summary shows); ci_low / ci_high are the
-- percentiles (1 - level) / 2 and (1 + level) / 2 of replicates 1..n_boot and se is their
-- standard deviation.  Metrics present in fewer than var('min_layers') layers get NULL bounds and
-- a note.  Metrics without a value for the model (e.g. the empirical estimator not computed)
-- have no row.  When the model has a document-group jackknife (the analysis `uncertainty`),
-- se_documents is its document-level standard error (int_model_metric_documents) and
-- ci_low_combined / ci_high_combined = estimate -/+ z * sqrt(se^2 + se_documents^2) (z for the
-- level: 1.96 at 95 %); NULL without a jackknife or without a bootstrap se.
{%- set level = var('ci_level') %}
{%- set z = normal_z(level) %}
{%- set derived = derived_metric_groups() %}
with reps as (
    select * from {{ ref('int_model_metric_replicates') }}
),

catalogue as (
    select * from {{ metric_catalogue_values() }}
    union all
    select * from (values
    {%- for name, grp in derived.items() %}
        ('{{ name }}', 'derived', '{{ grp }}'){{ ',' if not loop.last }}
    {%- endfor %}
    ) as d(metric, agg, metric_group)
    union all
    select metric, agg, 'rope' from {{ rope_metric_values() }} where agg = 'derived'
),

rope_support as (
    select metric, support_metric from {{ rope_metric_values() }}
),

support as (
    -- heads and layers holding a value of the metric (derived metrics: of their source metric)
    select model_id, metric, count(*) as n_heads, count(distinct layer) as n_layers
    from {{ ref('int_head_metric_values') }}
    group by model_id, metric
),

point as (
    select
        r.model_id,
        r.metric,
        r.value as estimate,
        case
            when rs.metric is not null then rs.support_metric
            when r.metric like 'gauss_gap%' then 'ap_overall_empirical'
            when r.metric = 'bias_strength_ctx' then 'bias_strength'
            when k.agg = 'derived' and r.metric like '%_empirical' then 'ap_overall_empirical'
            when k.agg = 'derived' then 'ap_overall'
            else r.metric
        end as support_metric,
        k.agg,
        k.metric_group
    from reps as r
    join catalogue as k using (metric)
    left join rope_support as rs using (metric)
    where r.replicate = 0 and r.value is not null
),

boot as (
    -- both percentiles from one quantile_cont call (one pass over the replicates, same values)
    select model_id, metric, q[1] as q_low, q[2] as q_high, sd, n_boot_valid, n_boot_drawn
    from (
        select
            model_id,
            metric,
            quantile_cont(value, [{{ 0.5 - level / 2 }}, {{ 0.5 + level / 2 }}]) as q,
            list_aggregate(list(value order by replicate), 'stddev_samp') as sd,
            count(value) as n_boot_valid,
            count(*) as n_boot_drawn
        from reps
        where replicate > 0
        group by model_id, metric
    )
),

models as (
    select model_id, family, label from {{ ref('int_models') }}
),

documents as (
    select model_id, metric, se_documents, n_document_groups
    from {{ ref('int_model_metric_documents') }}
),

layers as (
    select
        p.*,
        case when s.n_layers >= {{ var('min_layers') }} and b.n_boot_valid >= 2 then b.q_low end as ci_low,
        case when s.n_layers >= {{ var('min_layers') }} and b.n_boot_valid >= 2 then b.q_high end as ci_high,
        case when s.n_layers >= {{ var('min_layers') }} and b.n_boot_valid >= 2 then b.sd end as se,
        s.n_heads,
        s.n_layers,
        b.n_boot_valid,
        b.n_boot_drawn
    from point as p
    left join support as s on s.model_id = p.model_id and s.metric = p.support_metric
    left join boot as b on b.model_id = p.model_id and b.metric = p.metric
)

select
    p.model_id,
    m.label,
    m.family,
    p.metric,
    p.metric_group,
    p.agg as aggregation,
    p.estimate,
    p.ci_low,
    p.ci_high,
    p.se,
    d.se_documents,
    case when p.se is not null and d.se_documents is not null
         then p.estimate - {{ z }} * sqrt(p.se * p.se + d.se_documents * d.se_documents) end as ci_low_combined,
    case when p.se is not null and d.se_documents is not null
         then p.estimate + {{ z }} * sqrt(p.se * p.se + d.se_documents * d.se_documents) end as ci_high_combined,
    d.n_document_groups,
    p.n_heads,
    p.n_layers,
    coalesce(p.n_boot_valid, 0) as n_boot_valid,
    {{ var('n_boot') }} as n_boot,
    cast({{ level }} as double) as level,
    {{ var('boot_seed') }} as seed,
    'layer_cluster_bootstrap_percentile' as method,
    case
        when p.n_layers < {{ var('min_layers') }}
            then 'fewer than {{ var('min_layers') }} layers with a value: no interval'
        when p.n_boot_valid < p.n_boot_drawn
            then cast(p.n_boot_drawn - p.n_boot_valid as varchar)
                 || ' replicates drew no layer with a value; the interval uses the others'
    end as note
from layers as p
join models as m using (model_id)
left join documents as d on d.model_id = p.model_id and d.metric = p.metric
-- a stable row order for readers that select without ORDER BY
order by model_id, metric
