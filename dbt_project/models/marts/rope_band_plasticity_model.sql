-- RoPE band plasticity per model, band, variant and estimator (docs/metrics/rope.md): the model
-- profile aggregated exactly like the full head's (model decile_k = mean over heads with a value
-- for it; ap_overall = mean of head ap_overall; quintiles, first / last 20 % and drop from the
-- model deciles).  The values are replicate 0 of int_model_metric_replicates (metrics
-- rope_<metric>_<band>_<variant>), the intervals those of model_metric_ci.  Beside them, the
-- full head's profile (*_full) over the very same heads, aggregated by the same rules.
{%- set cols = plasticity_profile_columns() %}
with catalogue as (
    select * from {{ rope_metric_values() }}
),

point as (
    select
        r.model_id,
        k.band,
        k.variant,
        k.estimator,
        {%- for c in cols %}
        max(case when k.base = '{{ c }}' then r.value end) as {{ c }}{{ ',' if not loop.last }}
        {%- endfor %}
    from {{ ref('int_model_metric_replicates') }} as r
    join catalogue as k using (metric)
    where r.replicate = 0
    group by r.model_id, k.band, k.variant, k.estimator
),

ci as (
    select
        c.model_id,
        k.band,
        k.variant,
        k.estimator,
        {%- for base in ['ap_overall', 'ap_drop'] %}
        max(case when k.base = '{{ base }}' then c.ci_low end) as {{ base }}_ci_low,
        max(case when k.base = '{{ base }}' then c.ci_high end) as {{ base }}_ci_high{{ ',' if not loop.last }}
        {%- endfor %}
    from {{ ref('model_metric_ci') }} as c
    join catalogue as k using (metric)
    where k.base in ('ap_overall', 'ap_drop')
    group by c.model_id, k.band, k.variant, k.estimator
),

band_heads as (
    select * from {{ ref('int_rope_band_head_plasticity') }}
),

counts as (
    select
        model_id, band, variant, estimator,
        count(*) as n_heads,
        count(ap_overall) as n_heads_valid,
        count(distinct layer) as n_layers
    from band_heads
    group by model_id, band, variant, estimator
),

full_heads as (
    -- the full head's profile over the heads of each band row (same heads, same pairs)
    select
        b.model_id, b.band, b.variant, b.estimator,
        avg(f.ap_overall) as ap_overall_full,
        {%- for k in range(10) %}
        avg(f.decile_{{ k }}) as decile_{{ k }}_full{{ ',' if not loop.last }}
        {%- endfor %}
    from band_heads as b
    join {{ ref('int_head_plasticity') }} as f using (model_id, layer, q_head, estimator)
    group by b.model_id, b.band, b.variant, b.estimator
),

full_profile as (
    select
        *,
        {{ plasticity_derived(suffix='_full') }}
    from full_heads
),

models as (
    select model_id, family, label from {{ ref('int_models') }}
)

select
    p.model_id,
    m.label,
    m.family,
    p.band,
    {{ rope_band_order('p.band') }} as band_order,
    p.variant,
    p.estimator,
    c.n_heads,
    c.n_heads_valid,
    c.n_layers,
    {%- for col in cols %}
    p.{{ col }},
    {%- endfor %}
    i.ap_overall_ci_low,
    i.ap_overall_ci_high,
    i.ap_drop_ci_low,
    i.ap_drop_ci_high,
    f.ap_overall_full,
    {%- for k in range(10) %}
    f.decile_{{ k }}_full,
    {%- endfor %}
    f.ap_first_20pct_full,
    f.ap_last_20pct_full,
    f.ap_drop_full
from point as p
join models as m using (model_id)
left join counts as c using (model_id, band, variant, estimator)
left join ci as i using (model_id, band, variant, estimator)
left join full_profile as f using (model_id, band, variant, estimator)
-- a stable row order for readers that select without ORDER BY
order by model_id, {{ rope_band_order('band') }}, variant, estimator
