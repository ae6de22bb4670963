-- Fraction of heads per taxonomy class (docs/metrics/aggregation.md#taxonomy): per model, per family and over all ingested
-- heads.  Denominator = heads with PCA results; every class has a row (0 when absent).
with heads as (
    select model_id, family, taxonomy from {{ ref('head_taxonomy') }} where taxonomy is not null
),

scoped as (
    select 'model' as scope_kind, model_id as scope, model_id, taxonomy from heads
    union all
    select 'family', family, null, taxonomy from heads where family is not null
    union all
    select 'all', 'all', null, taxonomy from heads
),

totals as (
    select scope_kind, scope, any_value(model_id) as model_id, count(*) as n_total
    from scoped
    group by scope_kind, scope
),

counts as (
    select scope_kind, scope, taxonomy, count(*) as n_heads
    from scoped
    group by scope_kind, scope, taxonomy
)

select
    t.scope_kind,
    t.scope,
    t.model_id,
    c.taxonomy,
    c.class_order,
    coalesce(n.n_heads, 0) as n_heads,
    t.n_total,
    coalesce(n.n_heads, 0) / cast(t.n_total as double) as fraction
from totals as t
cross join {{ ref('taxonomy_classes') }} as c
left join counts as n
    on n.scope_kind = t.scope_kind and n.scope = t.scope and n.taxonomy = c.taxonomy
-- a stable row order for readers that select without ORDER BY
order by scope_kind, scope, taxonomy
