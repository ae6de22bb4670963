-- Two captures of one model (int_dataset_pairs), compared head by head: for every metric that
-- is a mean over heads (head_metric_catalogue agg = 'mean') or derived from such means (the
-- plasticity profile of both estimators and the Gaussian-minus-empirical gaps), the value of
-- each capture over the heads where BOTH captures have a value, once per layer-cluster bootstrap
-- replicate.  The replicates are model_a's draws (int_bootstrap_draws over model_a's layers,
-- replicate 0 = every layer once), applied to both captures: the two sides always use the same
-- heads with the same weights, so value_b - value_a of a mean metric is the weighted mean of the
-- per-head differences (B - A), and a derived metric is computed from each side's own means.
-- Sums run over lists in layer order, so every value is bit-reproducible.
{%- set derived = derived_metric_groups() %}
{%- set derived_names = [] %}
{%- for name in derived.keys() if name != 'bias_strength_ctx' %}{% do derived_names.append(name) %}{% endfor %}
with pairs as (
    select model_a, model_b from {{ ref('int_dataset_pairs') }}
),

catalogue as (
    select * from {{ metric_catalogue_values() }}
),

values_ as (
    select * from {{ ref('int_head_metric_values') }}
),

common as (
    -- heads of both captures holding a value of the metric
    select p.model_a, p.model_b, va.layer, va.q_head, va.metric, va.value as value_a, vb.value as value_b
    from pairs as p
    join values_ as va on va.model_id = p.model_a
    join values_ as vb
        on vb.model_id = p.model_b and vb.layer = va.layer and vb.q_head = va.q_head
        and vb.metric = va.metric
    join catalogue as k on k.metric = va.metric
    where k.agg = 'mean'
),

layer_stats as (
    select
        model_a,
        model_b,
        layer,
        metric,
        count(*) as n,
        sum(value_a order by q_head) as sa,
        sum(value_b order by q_head) as sb
    from common
    group by model_a, model_b, layer, metric
),

present as (
    select distinct model_a, model_b, metric from layer_stats
),

pair_stats as (
    -- per (pair, metric): the layer statistics as lists in model_a's cluster_index order
    select
        p.model_a,
        p.model_b,
        p.metric,
        list(coalesce(s.n, 0)::double order by c.cluster_index) as ns,
        list(coalesce(s.sa, 0)::double order by c.cluster_index) as sas,
        list(coalesce(s.sb, 0)::double order by c.cluster_index) as sbs
    from present as p
    join {{ ref('int_bootstrap_clusters') }} as c on c.model_id = p.model_a
    left join layer_stats as s
        on s.model_a = p.model_a and s.model_b = p.model_b and s.metric = p.metric
        and s.layer = c.layer
    group by p.model_a, p.model_b, p.metric
),

base as (
    select
        s.model_a,
        s.model_b,
        d.replicate,
        s.metric,
        case when list_dot_product(d.multiplicity, s.ns) > 0
             then list_dot_product(d.multiplicity, s.sas) / list_dot_product(d.multiplicity, s.ns)
        end as value_a,
        case when list_dot_product(d.multiplicity, s.ns) > 0
             then list_dot_product(d.multiplicity, s.sbs) / list_dot_product(d.multiplicity, s.ns)
        end as value_b
    from pair_stats as s
    join {{ ref('int_bootstrap_draws') }} as d on d.model_id = s.model_a
),

sides as (
    select model_a, model_b, replicate, 'a' as side, metric, value_a as value from base
    union all
    select model_a, model_b, replicate, 'b' as side, metric, value_b as value from base
),

derived as (
    {{ model_plasticity_derived('sides', ['model_a', 'model_b', 'replicate', 'side']) }}
),

derived_long as (
    select model_a, model_b, replicate, side, metric, value
    from (
        select model_a, model_b, replicate, side, {{ derived_names | join(', ') }}
        from derived
    ) unpivot (value for metric in ({{ derived_names | join(', ') }}))
)

select model_a, model_b, replicate, metric, value_a, value_b
from base
where value_a is not null and value_b is not null

union all

select a.model_a, a.model_b, a.replicate, a.metric, a.value as value_a, b.value as value_b
from derived_long as a
join derived_long as b
    on b.model_a = a.model_a and b.model_b = a.model_b and b.replicate = a.replicate
    and b.metric = a.metric and b.side = 'b'
where a.side = 'a'
