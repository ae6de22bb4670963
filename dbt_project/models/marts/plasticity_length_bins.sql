-- Plasticity per absolute-position length bin (docs/metrics/aggregation.md#length-bins-absolute-positions): LongBench-Pro, RULER and the
-- SmolLM3 short-/long-context checkpoint bins, as defined by the plasticity_bins seed and
-- assigned to models by plasticity_bin_rules.  Empty bins keep value NULL.
select
    b.model_id,
    m.family,
    m.context_length,
    m.checkpoint_phase,
    b.bin_set,
    b.bin_index,
    b.label,
    b.lo_tokens,
    b.hi_tokens,
    b.hi_inclusive,
    b.metric_name,
    b.benchmark,
    b.benchmark_length_tokens,
    b.ap,
    b.change_from_first_bin,
    b.n_heads,
    b.n_buckets,
    b.mean_position,
    b.is_preferred_metric
from {{ ref('int_model_length_bins') }} as b
join {{ ref('int_models') }} as m using (model_id)
-- a stable row order for readers that select without ORDER BY
order by model_id, bin_set, bin_index
