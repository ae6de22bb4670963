-- Model metrics beside external benchmark scores (spec §4 Tables 1-3, 8): observation rows pair
-- each ingested model's benchmark score (LongBench-Pro overall / per length, RULER per length /
-- average) with the metrics of var('benchmark_metrics') and, for per-length scores, the
-- matched plasticity length bin (metric = 'matched_len_bin').  Correlation rows give Pearson r
-- and n over models per (benchmark, mode, length, metric), plus one pooled over all lengths for
-- the matched bins (length_scope = 'pooled_lengths').
{%- set metrics = var('benchmark_metrics') %}
with models as (
    select model_id, family from {{ ref('int_models') }}
),

scores as (
    select
        s.benchmark,
        coalesce(s.mode, '') as mode,
        s.context_length_tokens,
        case when s.context_length_tokens is null then 'overall' else 'length' end as length_scope,
        s.model_id,
        m.family,
        s.score,
        s.source_table
    from {{ ref('benchmark_scores') }} as s
    join models as m using (model_id)
),

model_metric_obs as (
    select
        s.*,
        l.metric,
        l.value as metric_value,
        cast(null as varchar) as bin_metric_name
    from scores as s
    join {{ ref('int_model_metrics_long') }} as l
        on l.model_id = s.model_id
       and l.metric in ({% for m in metrics %}'{{ m }}'{{ ', ' if not loop.last }}{% endfor %})
),

bin_obs as (
    select
        s.*,
        'matched_len_bin' as metric,
        b.ap as metric_value,
        b.metric_name as bin_metric_name
    from scores as s
    join {{ ref('int_model_length_bins') }} as b
        on b.model_id = s.model_id
       and b.benchmark = s.benchmark
       and b.benchmark_length_tokens = s.context_length_tokens
),

observations as (
    select * from model_metric_obs
    union all
    select * from bin_obs
),

correlation_groups as (
    select benchmark, mode, length_scope, context_length_tokens, metric, score, metric_value,
           model_id
    from observations
    union all
    select benchmark, mode, 'pooled_lengths', cast(null as integer), metric, score, metric_value,
           model_id
    from observations
    where metric = 'matched_len_bin'
)

select
    'observation' as row_kind,
    benchmark,
    mode,
    length_scope,
    context_length_tokens,
    metric,
    model_id,
    family,
    score,
    metric_value,
    bin_metric_name,
    source_table,
    cast(null as bigint) as n,
    cast(null as double) as pearson_r
from observations

union all

select
    'correlation' as row_kind,
    benchmark,
    mode,
    length_scope,
    context_length_tokens,
    metric,
    cast(null as varchar) as model_id,
    cast(null as varchar) as family,
    cast(null as double) as score,
    cast(null as double) as metric_value,
    cast(null as varchar) as bin_metric_name,
    cast(null as varchar) as source_table,
    {{ pair_count('metric_value', 'score') }} as n,
    round({{ pearson_r('metric_value', 'score') }}, 12) as pearson_r
from correlation_groups
group by benchmark, mode, length_scope, context_length_tokens, metric
