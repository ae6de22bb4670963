-- Every head-level input of a model-level metric in long form (model_id, layer, q_head, metric,
-- value): the expressions of head_metric_catalogue() over head_metrics and the per-component
-- values of pc_metric_catalogue() over stg_pca_components.  NULL values are left out.
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
