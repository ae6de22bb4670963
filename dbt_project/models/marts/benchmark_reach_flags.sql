-- Every per-length benchmark score of an ingested model, flagged where the length lies beyond
-- what the per-head measurements can say (docs/metrics/reach.md#architectural-limits): beyond
-- the measured context, beyond the smallest sliding window, or beyond the RoPE extrapolation
-- bound.  One row per (benchmark, mode, length, model).
select
    s.benchmark,
    coalesce(s.mode, '') as mode,
    s.context_length_tokens,
    s.model_id,
    s.score,
    l.measured_context,
    l.min_window,
    l.extrapolation_bound,
    s.context_length_tokens > l.measured_context as beyond_measured,
    coalesce(s.context_length_tokens > l.min_window, false) as beyond_window,
    coalesce(s.context_length_tokens > l.extrapolation_bound, false) as beyond_extrapolation,
    not (
        s.context_length_tokens > l.measured_context
        or coalesce(s.context_length_tokens > l.min_window, false)
        or coalesce(s.context_length_tokens > l.extrapolation_bound, false)
    ) as measurable
from {{ ref('benchmark_scores') }} as s
join {{ ref('model_reach_limits') }} as l using (model_id)
where s.context_length_tokens is not null
order by s.benchmark, mode, s.context_length_tokens, s.model_id
