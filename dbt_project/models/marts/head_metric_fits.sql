-- Least-squares lines between the head-level metrics of each var('correlation_pairs') pair, in
-- both directions (response on predictor), over all heads, within each family and within each
-- model: the sets of family_correlations, whose Pearson r and intervals go with these lines.
-- Heads where both metrics are finite; lists in (model_id, layer, q_head) order (macro ols_line).
{%- set fits = [] %}
{%- for p in var('correlation_pairs') %}
    {%- do fits.append((p[0], p[1])) %}
    {%- do fits.append((p[1], p[0])) %}
{%- endfor %}
with obs as (
    {%- for response, predictor in fits %}
    select
        '{{ response }}' as response,
        '{{ predictor }}' as predictor,
        model_id,
        layer,
        q_head,
        family,
        cast("{{ predictor }}" as double) as x,
        cast("{{ response }}" as double) as y
    from {{ ref('head_metrics') }}
    where isfinite("{{ predictor }}") and isfinite("{{ response }}")
    {{ 'union all' if not loop.last }}
    {%- endfor %}
),

scoped as (
    select 'all' as scope_kind, 'all' as scope, cast(null as varchar) as family, * exclude (family)
    from obs
    union all
    select 'family', family, family, * exclude (family)
    from obs
    where family is not null
    union all
    select 'model', model_id, family, * exclude (family)
    from obs
),

groups as (
    select
        response,
        predictor,
        scope_kind,
        scope,
        any_value(family) as family,
        list(x order by model_id, layer, q_head) as xs,
        list(y order by model_id, layer, q_head) as ys
    from scoped
    group by response, predictor, scope_kind, scope
),

centred as (
    select *, {{ ols_means('xs', 'ys') }}
    from groups
)

select
    response,
    predictor,
    scope_kind,
    scope,
    family,
    {{ ols_line('xs', 'ys') }}
from centred
-- a stable row order for readers that select without ORDER BY
order by response, predictor, scope_kind, scope
