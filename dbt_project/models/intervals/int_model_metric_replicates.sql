-- Every model-level metric of model_summary that aggregates heads, once per layer-cluster
-- bootstrap replicate: (model_id, replicate, metric, value).  Replicate 0 takes every layer
-- once and IS the point estimate (model_summary reads it); replicates 1..n_boot draw the layers
-- with replacement (int_bootstrap_draws) and count every head of a drawn layer as often as the
-- layer was drawn.  Each metric keeps its own aggregation rule (head_metric_catalogue: means
-- over heads, 0/1 means for fractions, medians, max) and the derived metrics (quintiles,
-- first / last 20 %, drop, recovery, gaps; per RoPE band and variant: quintiles, first / last
-- 20 % and drop) are computed from the same replicate's values.
-- Only metrics with a value in the model appear (a derived metric: where it is defined).
-- Sums run over lists in layer order (list_dot_product), so every value is bit-reproducible.
{%- set derived = derived_metric_groups() %}
with clusters as (
    select * from {{ ref('int_bootstrap_clusters') }}
),

catalogue as (
    select * from {{ metric_catalogue_values() }}
),

layer_stats as (
    -- per (model, layer, metric): count, ordered sum, max and the head values in head order
    select
        model_id,
        layer,
        metric,
        count(value) as n,
        sum(value order by q_head) as s,
        max(value) as vmax,
        list(value order by q_head) as vals
    from {{ ref('int_head_metric_values') }}
    group by model_id, layer, metric
),

present as (
    select distinct l.model_id, l.metric, k.agg
    from layer_stats as l
    join catalogue as k using (metric)
),

model_stats as (
    -- per (model, metric with a value): the layer statistics as lists in cluster_index order
    select
        c.model_id,
        k.metric,
        k.agg,
        list(coalesce(s.n, 0)::double order by c.cluster_index) as ns,
        list(coalesce(s.s, 0)::double order by c.cluster_index) as ss,
        list(s.vmax order by c.cluster_index) as maxes,
        list(coalesce(s.vals, []::double[]) order by c.cluster_index) as valss
    from clusters as c
    join present as k using (model_id)
    left join layer_stats as s
        on s.model_id = c.model_id and s.layer = c.layer and s.metric = k.metric
    group by c.model_id, k.metric, k.agg
),

draws as (
    select model_id, replicate, multiplicity from {{ ref('int_bootstrap_draws') }}
),

base as (
    select
        d.model_id,
        d.replicate,
        s.metric,
        case when list_dot_product(d.multiplicity, s.ns) > 0
             then list_dot_product(d.multiplicity, s.ss) / list_dot_product(d.multiplicity, s.ns)
        end as value
    from draws as d
    join model_stats as s on s.model_id = d.model_id and s.agg = 'mean'

    union all

    select
        d.model_id,
        d.replicate,
        s.metric,
        list_median(flatten(list_transform(s.valss, lambda v, i:
            repeat(v, cast(d.multiplicity[i] as bigint))))) as value
    from draws as d
    join model_stats as s on s.model_id = d.model_id and s.agg = 'median'

    union all

    select
        d.model_id,
        d.replicate,
        s.metric,
        list_max(list_transform(s.maxes, lambda x, i: case when d.multiplicity[i] > 0 then x end)) as value
    from draws as d
    join model_stats as s on s.model_id = d.model_id and s.agg = 'max'
),

plasticity_base as (
    -- the metrics the pivot below reads (ap_overall, decile_0..9 of each estimator and
    -- bias_strength), not every metric of the replicate
    select model_id, replicate, metric, value
    from base
    where metric in (
        'bias_strength'
        {%- for e in plasticity_estimators() %}, 'ap_overall{{ e.suffix }}'
        {%- for k in range(10) %}, 'decile_{{ k }}{{ e.suffix }}'{% endfor %}
        {%- endfor %}
    )
),

derived as (
    select d.*, d.bias_strength * m.context_length as bias_strength_ctx
    from ({{ model_plasticity_derived('plasticity_base', ['model_id', 'replicate'], carry=['bias_strength']) }}) as d
    join {{ ref('int_models') }} as m using (model_id)
),

rope_catalogue as (
    select * from {{ rope_metric_values() }}
),

rope_wide as (
    -- RoPE band plasticity: the replicate's model deciles per band, variant and estimator
    select
        b.model_id,
        b.replicate,
        k.band,
        k.variant,
        k.estimator,
        {%- for k in range(10) %}
        max(case when k.base = 'decile_{{ k }}' then b.value end) as decile_{{ k }}{{ ',' if not loop.last }}
        {%- endfor %}
    from base as b
    join rope_catalogue as k using (metric)
    group by b.model_id, b.replicate, k.band, k.variant, k.estimator
),

rope_derived as (
    select model_id, replicate, band, variant, estimator, base, value
    from (
        select
            model_id, replicate, band, variant, estimator,
            {{ plasticity_derived() }}
        from rope_wide
    ) unpivot (value for base in (
        quintile_0, quintile_1, quintile_2, quintile_3, quintile_4,
        ap_first_20pct, ap_last_20pct, ap_drop
    ))
)

select model_id, replicate, metric, value
from base

union all

select model_id, replicate, metric, value
from (
    select model_id, replicate, {{ derived.keys() | join(', ') }}
    from derived
) unpivot (value for metric in ({{ derived.keys() | join(', ') }}))

union all

select d.model_id, d.replicate, k.metric, d.value
from rope_derived as d
join rope_catalogue as k using (band, variant, estimator, base)
