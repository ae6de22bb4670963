-- Our value beside every published value (reference seeds published_model_metrics and
-- published_layer_metrics) for the ingested models, with difference = ours - published and the
-- tolerance of the first matching anchor_tolerances rule
-- (docs/metrics/aggregation.md#benchmarks-and-published-numbers).
with models as (
    select model_id from {{ ref('int_models') }}
),

published as (
    select
        'model' as level,
        p.model_id,
        cast(null as integer) as layer,
        p.metric,
        p.source_table,
        p.is_preferred,
        p.value as published_value
    from {{ ref('published_model_metrics') }} as p
    where p.model_id in (select model_id from models)

    union all

    select
        'layer' as level,
        p.model_id,
        p.layer,
        p.metric,
        p.source_table,
        true as is_preferred,
        p.value as published_value
    from {{ ref('published_layer_metrics') }} as p
    where p.model_id in (select model_id from models)
),

ours_model as (
    select model_id, metric, value from {{ ref('int_model_metrics_long') }}
),

ours_layer as (
    select model_id, layer, metric, value
    from (
        select
            model_id,
            layer,
            decile_0_1_mean,
            decile_4_5_mean,
            decile_6_7_mean,
            decile_8_9_mean,
            recovery as mid_context_recovery,
            ap_overall,
            q_beta_norm as beta_norm,
            q_R2_pos as r2_pos
        from {{ ref('layer_profile') }}
    ) unpivot include nulls (
        value for metric in (decile_0_1_mean, decile_4_5_mean, decile_6_7_mean, decile_8_9_mean,
                             mid_context_recovery, ap_overall, beta_norm, r2_pos)
    )
),

compared as (
    select
        p.*,
        coalesce(om.value, ol.value) as our_value
    from published as p
    left join ours_model as om
        on p.level = 'model' and om.model_id = p.model_id and om.metric = p.metric
    left join ours_layer as ol
        on p.level = 'layer' and ol.model_id = p.model_id and ol.layer = p.layer
       and ol.metric = p.metric
),

with_rule as (
    select
        c.*,
        t.priority as tolerance_rule,
        greatest(coalesce(t.abs_tolerance, 0), coalesce(t.rel_tolerance, 0) * abs(c.published_value))
            as tolerance,
        row_number() over (
            partition by c.level, c.model_id, c.layer, c.metric, c.source_table
            order by t.priority nulls last
        ) as rule_rank
    from compared as c
    left join {{ ref('anchor_tolerances') }} as t
        on regexp_full_match(c.metric, t.metric_pattern)
)

select
    level,
    model_id,
    layer,
    metric,
    source_table,
    is_preferred,
    published_value,
    our_value,
    our_value - published_value as difference,
    abs(our_value - published_value) as abs_difference,
    (our_value - published_value) / nullif(abs(published_value), 0) as rel_difference,
    tolerance,
    tolerance_rule,
    case when our_value is not null then abs(our_value - published_value) <= tolerance end
        as within_tolerance
from with_rule
where rule_rank = 1
-- a stable row order for readers that select without ORDER BY
order by level, model_id, layer, metric, source_table
