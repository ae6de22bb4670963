-- Every head-level input of a model-level metric in long form (model_id, layer, q_head, metric,
-- value): the expressions of head_metric_catalogue() over head_metrics and the per-component
-- values of pc_metric_catalogue() over stg_pca_components and the RoPE band plasticity of
-- rope_head_metrics() over int_rope_band_head_plasticity, and the band energy shares of
-- rope_energy_metrics() over int_rope_band_head_energy.  NULL values are left out.
{%- set cat = head_metric_catalogue() %}
{%- set pcs = pc_metric_catalogue() %}
with wide as (
    select
        model_id,
        layer,
        q_head,
        {%- for e in cat %}
        cast({{ e.expr }} as double) as "{{ e.metric }}"{{ ',' if not loop.last }}
        {%- endfor %}
    from {{ ref('head_metrics') }}
),

components as (
    select c.*
    from {{ ref('stg_pca_components') }} as c
    where c.model_id in (select model_id from {{ ref('int_models') }})
),

rope_catalogue as (
    select * from {{ rope_metric_values() }}
),

rope_long as (
    select model_id, layer, q_head, band, variant, estimator, base, value
    from (
        select
            model_id, layer, q_head, band, variant, estimator, ap_overall,
            {%- for k in range(10) %}
            decile_{{ k }}{{ ',' if not loop.last }}
            {%- endfor %}
        from {{ ref('int_rope_band_head_plasticity') }}
    ) unpivot (value for base in (
        ap_overall,
        {%- for k in range(10) %}
        decile_{{ k }}{{ ',' if not loop.last }}
        {%- endfor %}
    ))
)

select model_id, layer, q_head, metric, value
from wide
unpivot (value for metric in (
    {%- for e in cat %}
    "{{ e.metric }}"{{ ',' if not loop.last }}
    {%- endfor %}
))
{%- for e in pcs %}
union all
select model_id, layer, q_head, '{{ e.metric }}' as metric, cast({{ e.expr }} as double) as value
from components
where pc = {{ e.pc }} and {{ e.expr }} is not null
{%- endfor %}
union all
select r.model_id, r.layer, r.q_head, k.metric, cast(r.value as double) as value
from rope_long as r
join rope_catalogue as k using (band, variant, estimator, base)
where r.value is not null
{%- for e in rope_energy_metrics() %}
union all
select model_id, layer, q_head, '{{ e.metric }}' as metric, cast({{ e.column }} as double) as value
from {{ ref('int_rope_band_head_energy') }}
where band = '{{ e.band }}'
{%- endfor %}
