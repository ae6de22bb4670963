-- Document-level standard error of the model-level metrics, from the delete-a-group jackknife
-- of the analysis `uncertainty` (stg_plasticity_buckets_jackknife, stg_head_jackknife).
-- theta_(g) is the model value computed from every jackknifed head's value without document group
-- g, with the metric's own aggregation: plasticity buckets -> head ap_overall and deciles (the
-- n-weighted rules of int_head_plasticity) -> model means -> first / last 20 %, drop, gaps (as
-- int_model_metric_replicates); the PCA / rotation head scalars (and q_beta_norm, q_R2_pos) ->
-- model means (the mean metrics of head_metric_catalogue).  A head with no rows in group g keeps its
-- full value there (leaving out nothing changes nothing).  Groups with no rows in any head of the
-- model are left out: G' = the groups that have rows, and
--   se_documents = sqrt((G' - 1) / G' * sum_g (theta_(g) - mean_g theta_(g))^2)
-- for metrics with at least two such groups.  One row per (model, metric) with a value.
{%- set cat = head_metric_catalogue() %}
{%- set scalar = [] %}
{#- head scalars averaged over heads that declare a document term (documents): PCA, rotation, and
    the plasticity regression scalars (the plasticity profile itself, declared with the facet
    profile, comes from the buckets below) -#}
{%- for e in cat if e.agg == 'mean' and e.documents and e.profile is not defined %}{% do scalar.append(e) %}{% endfor %}
{#- the head_jackknife metrics the scalar expressions read: head_metrics column names; abs_x = abs(x) -#}
{%- set raw = ['bias_strength', 'mu_q_a', 'var_frac_a', 'var_frac_b'] %}
{%- for e in scalar if e.expr == e.metric and not e.metric.startswith('abs_') and e.metric not in raw %}{% do raw.append(e.metric) %}{% endfor %}
{%- set absolute = [] %}
{%- for e in scalar if e.expr == e.metric and e.metric.startswith('abs_') %}{% do absolute.append(e.metric[4:]) %}{% endfor %}
{%- set derived = derived_metric_groups() %}
{%- set derived_names = [] %}
{%- for e in model_metric_catalogue() if e.metric in derived and e.documents %}{% do derived_names.append(e.metric) %}{% endfor %}
with models as (
    select model_id, context_length from {{ ref('int_models') }}
),

jk_buckets as (
    select * from {{ ref('stg_plasticity_buckets_jackknife') }}
    where model_id in (select model_id from models)
),

jk_heads as (
    select * from {{ ref('stg_head_jackknife') }}
    where model_id in (select model_id from models)
),

no_rows as (
    -- (head, group) pairs where the head has no rows of the group
    select distinct model_id, layer, q_head, doc_group from jk_buckets where q_bucket = -1
    union
    select distinct model_id, layer, q_head, doc_group from jk_heads where metric = 'no_rows'
),

jk_head_keys as (
    select distinct model_id, layer, q_head, doc_group from jk_buckets
    union
    select distinct model_id, layer, q_head, doc_group from jk_heads
),

groups as (
    -- G': the document groups with rows in at least one head of the model
    select distinct k.model_id, k.doc_group
    from jk_head_keys as k
    anti join no_rows as n using (model_id, layer, q_head, doc_group)
),

-- plasticity: the buckets without the group, through the head rules of int_head_plasticity
bucket_estimates as (
    {%- for e in plasticity_estimators() %}
    select
        b.model_id,
        b.layer,
        b.q_head,
        b.doc_group,
        '{{ e.suffix }}' as suffix,
        b.{{ e.ap }} as ap,
        cast(least(greatest(floor(10 * (b.bucket_position / nullif(m.context_length, 0))), 0), 9) as integer) as decile,
        case when b.{{ e.ap }} is not null and b.n_queries > 0 then cast(b.n_queries as double) end as weight
    from jk_buckets as b
    join models as m using (model_id)
    where b.q_bucket >= 0
    {{ 'union all' if not loop.last }}
    {%- endfor %}
),

head_plasticity as (
    select model_id, layer, q_head, doc_group, 'ap_overall' || suffix as metric,
           sum(weight * ap) / sum(weight) as value
    from bucket_estimates
    where weight is not null
    group by model_id, layer, q_head, doc_group, suffix
    union all
    select model_id, layer, q_head, doc_group, 'decile_' || cast(decile as varchar) || suffix as metric,
           sum(weight * ap) / sum(weight) as value
    from bucket_estimates
    where weight is not null and decile is not null
    group by model_id, layer, q_head, doc_group, suffix, decile
),

-- PCA / rotation: the head scalars without the group, through head_metric_catalogue's expressions
scalar_wide as (
    select
        model_id,
        layer,
        q_head,
        doc_group,
        {%- set items = [] %}
        {%- for c in raw %}{% do items.append("max(case when metric = '" ~ c ~ "' then value end) as \"" ~ c ~ "\"") %}{% endfor %}
        {%- for c in absolute %}{% do items.append("abs(max(case when metric = '" ~ c ~ "' then value end)) as \"abs_" ~ c ~ "\"") %}{% endfor %}
        {%- for item in items %}
        {{ item }}{{ ',' if not loop.last }}
        {%- endfor %}
    from jk_heads
    where metric <> 'no_rows'
    group by model_id, layer, q_head, doc_group
),

head_scalars as (
    {%- for e in scalar %}
    select model_id, layer, q_head, doc_group, '{{ e.metric }}' as metric, cast({{ e.expr }} as double) as value
    from scalar_wide
    {{ 'union all' if not loop.last }}
    {%- endfor %}
),

left_out as (
    select * from head_plasticity
    union all
    select * from head_scalars
),

full_values as (
    -- a head without rows of the group: its full value
    select n.model_id, n.layer, n.q_head, n.doc_group, v.metric, v.value
    from no_rows as n
    join {{ ref('int_head_metric_values') }} as v using (model_id, layer, q_head)
    where v.metric in (select distinct metric from left_out)
),

head_values as (
    select h.*
    from (
        select * from left_out
        where not exists (
            select 1 from no_rows as n
            where n.model_id = left_out.model_id and n.layer = left_out.layer
              and n.q_head = left_out.q_head and n.doc_group = left_out.doc_group
        )
        union all
        select * from full_values
    ) as h
    semi join groups as g using (model_id, doc_group)
    where h.value is not null and isfinite(h.value)
),

base as (
    -- theta_(g) of the mean metrics (sums in head order: bit-reproducible)
    select model_id, doc_group, metric, sum(value order by layer, q_head) / count(value) as theta
    from head_values
    group by model_id, doc_group, metric
),

derived as (
    {{ model_plasticity_derived('base', ['model_id', 'doc_group'], value='theta') }}
),

thetas as (
    select model_id, doc_group, metric, theta from base
    union all
    select model_id, doc_group, metric, value as theta
    from (
        select model_id, doc_group, {{ derived_names | join(', ') }}
        from derived
    ) unpivot (value for metric in ({{ derived_names | join(', ') }}))
)

select
    model_id,
    metric,
    count(theta) as n_document_groups,
    case when count(theta) >= 2
         then sqrt((count(theta) - 1) * list_aggregate(list(theta order by doc_group), 'var_pop'))
    end as se_documents
from thetas
where theta is not null and isfinite(theta)
group by model_id, metric
