-- Does the text a model was captured on change its numbers?  Every pair of captures of one model
-- on different datasets (int_dataset_pairs: same hf_model and checkpoint, model_a < model_b),
-- compared head by head on the heads both hold, for each metric of comparison_metrics() (the declared compared metrics,
-- or the dbt var comparison_metrics when set):
-- difference = value(A) - value(B) (estimate_a - estimate_b, as in model_comparisons and
-- `qkwh compare A B` with A = model_a) on those heads and its interval.  The layer term comes from
-- the layer-cluster bootstrap of the per-head differences (int_dataset_pair_replicates);
-- when either capture has a document-group jackknife (model_metric_ci.se_documents), its
-- SE_doc is added: se = sqrt(se_layers^2 + se_documents_a^2 + se_documents_b^2) and the
-- interval is difference -/+ z * se (`interval` = 'layers+documents').  Without a jackknife the
-- interval is the bootstrap percentile interval of the differences (`interval` = 'layers').
-- distinguishable = the interval excludes 0; NULL when there is no interval.
{%- set level = var('ci_level') %}
{%- set metrics = comparison_metrics() %}
{%- set z = normal_z(level) %}
with pairs as (
    select * from {{ ref('int_dataset_pairs') }}
),

reps as (
    select * from {{ ref('int_dataset_pair_replicates') }}
    where metric in ({% for m in metrics %}'{{ m }}'{{ ', ' if not loop.last }}{% endfor %})
),

catalogue as (
    select metric, metric_group from {{ metric_catalogue_values() }}
    union all
    select * from (values
    {%- for name, grp in derived_metric_groups().items() %}
        ('{{ name }}', '{{ grp }}'){{ ',' if not loop.last }}
    {%- endfor %}
    ) as d(metric, metric_group)
),

point as (
    select
        model_a,
        model_b,
        metric,
        value_a as estimate_a,
        value_b as estimate_b,
        value_a - value_b as difference,
        case
            when metric like 'gauss_gap%' then 'ap_overall_empirical'
            when metric like '%_empirical' then 'ap_overall_empirical'
            when metric like 'ap_%' or metric like 'quintile_%' then 'ap_overall'
            else metric
        end as support_metric
    from reps
    where replicate = 0
),

support as (
    -- heads and layers both captures hold a value for (derived metrics: of their source metric)
    select p.model_a, p.model_b, va.metric, count(*) as n_heads, count(distinct va.layer) as n_layers
    from pairs as p
    join {{ ref('int_head_metric_values') }} as va on va.model_id = p.model_a
    join {{ ref('int_head_metric_values') }} as vb
        on vb.model_id = p.model_b and vb.layer = va.layer and vb.q_head = va.q_head
        and vb.metric = va.metric
    group by p.model_a, p.model_b, va.metric
),

boot as (
    select
        model_a,
        model_b,
        metric,
        quantile_cont(value_a - value_b, {{ 0.5 - level / 2 }}) as q_low,
        quantile_cont(value_a - value_b, {{ 0.5 + level / 2 }}) as q_high,
        list_aggregate(list(value_a - value_b order by replicate), 'stddev_samp') as sd,
        count(*) as n_boot_valid
    from reps
    where replicate > 0
    group by model_a, model_b, metric
),

documents as (
    select model_id, metric, se_documents from {{ ref('model_metric_ci') }}
    where se_documents is not null
),

terms as (
    select
        pt.*,
        k.metric_group,
        s.n_heads,
        s.n_layers,
        b.n_boot_valid,
        case when s.n_layers >= {{ var('min_layers') }} and b.n_boot_valid >= 2 then b.sd end as se_layers,
        case when s.n_layers >= {{ var('min_layers') }} and b.n_boot_valid >= 2 then b.q_low end as q_low,
        case when s.n_layers >= {{ var('min_layers') }} and b.n_boot_valid >= 2 then b.q_high end as q_high,
        da.se_documents as se_documents_a,
        db.se_documents as se_documents_b
    from point as pt
    left join catalogue as k using (metric)
    left join support as s
        on s.model_a = pt.model_a and s.model_b = pt.model_b and s.metric = pt.support_metric
    left join boot as b on b.model_a = pt.model_a and b.model_b = pt.model_b and b.metric = pt.metric
    left join documents as da on da.model_id = pt.model_a and da.metric = pt.metric
    left join documents as db on db.model_id = pt.model_b and db.metric = pt.metric
),

combined as (
    select
        *,
        case
            when se_layers is null then null
            when se_documents_a is null and se_documents_b is null then 'layers'
            else 'layers+documents'
        end as "interval",
        sqrt(se_layers ^ 2 + coalesce(se_documents_a, 0) ^ 2 + coalesce(se_documents_b, 0) ^ 2) as se
    from terms
),

bounds as (
    select
        *,
        case when "interval" = 'layers' then q_low
             when "interval" = 'layers+documents' then difference - {{ z }} * se end as ci_low,
        case when "interval" = 'layers' then q_high
             when "interval" = 'layers+documents' then difference + {{ z }} * se end as ci_high
    from combined
)

select
    c.model_a,
    c.model_b,
    p.label_a,
    p.label_b,
    p.dataset_a,
    p.dataset_b,
    p.hf_model,
    c.metric,
    c.metric_group,
    c.estimate_a,
    c.estimate_b,
    c.difference,
    c.ci_low,
    c.ci_high,
    c.se,
    c.se_layers,
    c.se_documents_a,
    c.se_documents_b,
    c."interval",
    case when c.ci_low is not null then c.ci_low > 0 or c.ci_high < 0 end as distinguishable,
    c.n_heads,
    c.n_layers,
    coalesce(c.n_boot_valid, 0) as n_boot_valid,
    {{ var('n_boot') }} as n_boot,
    cast({{ level }} as double) as level,
    {{ var('boot_seed') }} as seed,
    'paired_heads_layer_cluster_bootstrap' as method,
    case
        when c.se_layers is null
            then 'fewer than {{ var('min_layers') }} layers hold both captures: no interval'
        when (c.se_documents_a is null) <> (c.se_documents_b is null)
            then 'only ' || case when c.se_documents_a is null then 'B' else 'A' end
                 || ' has a document jackknife; the other capture''s document noise is not counted'
    end as note
from bounds as c
join pairs as p on p.model_a = c.model_a and p.model_b = c.model_b
-- a stable row order for readers that select without ORDER BY
order by model_a, model_b, metric
