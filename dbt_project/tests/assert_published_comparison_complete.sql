-- Every published value of an ingested model appears in published_comparison exactly once.
with expected as (
    select 'model' as level, model_id, cast(null as integer) as layer, metric, source_table
    from {{ ref('published_model_metrics') }}
    where model_id in (select model_id from {{ ref('stg_models') }})
    union all
    select 'layer', model_id, layer, metric, source_table
    from {{ ref('published_layer_metrics') }}
    where model_id in (select model_id from {{ ref('stg_models') }})
)

select e.*
from expected as e
left join {{ ref('published_comparison') }} as p
    on p.level = e.level and p.model_id = e.model_id and p.layer is not distinct from e.layer
   and p.metric = e.metric and p.source_table = e.source_table
where p.model_id is null
