-- Every head-level input of a model-level metric in long form (model_id, layer, q_head, metric,
-- value): the declared metrics (model_metric_catalogue()) that are not derived -- the
-- expressions of head_metric_catalogue() over head_metrics, the RoPE band plasticity of
-- rope_head_metrics() over int_rope_band_head_plasticity, and every other one
-- (relation_metric_catalogue(): per-component PCA values, band energy shares, metrics of
-- analyses of your own) as its expression over its source relation's rows.  NULL values are
-- left out.
{%- set cat = head_metric_catalogue() %}
{%- set others = relation_metric_catalogue() %}
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
{%- for e in others %}
union all
select model_id, layer, q_head, '{{ e.metric }}' as metric, cast({{ e.expr }} as double) as value
from {{ ref(e.source) }}
where {{ '(' ~ e.where ~ ') and ' if e.where }}({{ e.expr }}) is not null
{%- endfor %}
union all
select r.model_id, r.layer, r.q_head, k.metric, cast(r.value as double) as value
from rope_long as r
join rope_catalogue as k using (band, variant, estimator, base)
where r.value is not null
