-- Plasticity buckets in long form, one row per bucket and estimator (gaussian: ap_bucket;
-- empirical: ap_bucket_empirical, only where compute counted it), with the relative position
-- f_j = tau_j / L_ctx, the decile it falls in (floor(10 f_j), clipped to 9; docs/metrics/aggregation.md) and
-- whether it counts in n-weighted means (finite AP and n_queries > 0).
with buckets as (
    select * from {{ ref('stg_plasticity_buckets') }}
),

models as (
    select model_id, context_length from {{ ref('int_models') }}
),

framed as (
    select
        b.*,
        coalesce(b.bucket_frac, b.bucket_position / nullif(m.context_length, 0)) as f
    from buckets as b
    join models as m using (model_id)
),

estimates as (
    {%- for e in plasticity_estimators() %}
    select
        framed.*,
        '{{ e.name }}' as estimator,
        {{ e.ap }} as ap,
        {{ e.se }} as ap_se
    from framed
    {%- if e.name != 'gaussian' %}
    where {{ e.ap }} is not null
    {%- endif %}
    {{ 'union all' if not loop.last }}
    {%- endfor %}
)

select
    *,
    cast(least(greatest(floor(10 * f), 0), 9) as integer) as decile,
    (ap is not null and n_queries > 0) as is_valid,
    case when ap is not null and n_queries > 0 then cast(n_queries as double) end as weight
from estimates
