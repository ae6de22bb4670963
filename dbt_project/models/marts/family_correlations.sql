-- Pearson r between head-level metrics (var('correlation_pairs'); default bias_strength vs
-- separation_strength, spec §5.3 / fig qk-rotation/07) over all heads, within each family and
-- within each model, with the number of complete pairs n.  r is NULL below var('min_corr_n')
-- pairs or when a side has zero variance; it is rounded to 12 decimals (bit-stable across
-- summation orders).
with heads as (
    select * from {{ ref('int_head_metrics') }}
),

scoped as (
    select 'all' as scope_kind, 'all' as scope, cast(null as varchar) as family, * exclude (family)
    from heads
    union all
    select 'family', family, family, * exclude (family)
    from heads
    where family is not null
    union all
    select 'model', model_id, family, * exclude (family)
    from heads
)

{%- for pair in var('correlation_pairs') %}
{%- set x = pair[0] %}
{%- set y = pair[1] %}
select
    '{{ x }}' as x_metric,
    '{{ y }}' as y_metric,
    scope_kind,
    scope,
    any_value(family) as family,
    {{ pair_count(x, y) }} as n,
    round({{ pearson_r(x, y) }}, 12) as pearson_r,
    count(distinct model_id) as n_models
from scoped
group by scope_kind, scope
{{ 'union all' if not loop.last }}
{%- endfor %}
