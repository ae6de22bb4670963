-- Model metrics beside external benchmark scores
-- (docs/metrics/aggregation.md#benchmarks-and-published-numbers): observation rows pair
-- each ingested model's benchmark score (LongBench-Pro overall / per length, RULER per length /
-- average) with the metrics of var('benchmark_metrics') and, for per-length scores, the
-- matched plasticity length bin (metric = 'matched_len_bin').  One row per (benchmark score,
-- metric, model); the correlations over models, with intervals, are in benchmark_correlations.
-- A per-length score is flagged where its length lies beyond what the per-head measurements can
-- say (model_reach_limits, docs/metrics/reach.md#architectural-limits): beyond the measured
-- context, the smallest sliding window or the RoPE extrapolation bound.
{%- set metrics = var('benchmark_metrics') %}
with models as (
    select model_id, family, label from {{ ref('int_models') }}
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

-- per (model, benchmark length): NULL for an overall score (no length) or a model without limits
flags as (
    select distinct
        s.model_id,
        s.context_length_tokens,
        s.context_length_tokens > l.measured_context as beyond_measured,
        coalesce(s.context_length_tokens > l.min_window, false) as beyond_window,
        coalesce(s.context_length_tokens > l.extrapolation_bound, false) as beyond_extrapolation
    from scores as s
    join {{ ref('model_reach_limits') }} as l using (model_id)
    where s.context_length_tokens is not null
)

select
    o.benchmark,
    o.mode,
    o.length_scope,
    o.context_length_tokens,
    o.metric,
    o.model_id,
    m.label,
    o.family,
    o.score,
    o.metric_value,
    o.bin_metric_name,
    o.source_table,
    f.beyond_measured,
    f.beyond_window,
    f.beyond_extrapolation,
    not (f.beyond_measured or f.beyond_window or f.beyond_extrapolation) as measurable
from observations as o
join models as m using (model_id)
left join flags as f
    on f.model_id = o.model_id
   and f.context_length_tokens = o.context_length_tokens
-- a stable row order for readers that select without ORDER BY
order by benchmark, mode, length_scope, context_length_tokens, metric, model_id
