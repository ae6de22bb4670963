-- Model value per applicable length bin: mean over heads of the head bin values.  Every bin of
-- an applicable set has a row; bins no bucket falls into keep value NULL (the published "-").
-- is_preferred_metric picks one row per (model_id, metric_name) when two sets share a name.
with model_bins as (
    select s.model_id, s.priority, b.*
    from {{ ref('int_model_bin_sets') }} as s
    join {{ ref('plasticity_bins') }} as b using (bin_set)
),

head_bins as (
    select
        model_id, bin_set, bin_index,
        avg(ap) as ap,
        count(*) as n_heads,
        sum(n_buckets) as n_buckets,
        sum(n_queries * mean_position) / sum(n_queries) as mean_position
    from {{ ref('int_head_length_bins') }}
    group by model_id, bin_set, bin_index
),

joined as (
    select
        mb.model_id,
        mb.bin_set,
        mb.bin_index,
        mb.label,
        mb.lo_tokens,
        mb.hi_tokens,
        mb.hi_inclusive,
        mb.metric_name,
        mb.benchmark,
        mb.benchmark_length_tokens,
        mb.priority,
        hb.ap,
        coalesce(hb.n_heads, 0) as n_heads,
        coalesce(hb.n_buckets, 0) as n_buckets,
        hb.mean_position
    from model_bins as mb
    left join head_bins as hb using (model_id, bin_set, bin_index)
)

select
    *,
    ap - first_value(ap) over (
        partition by model_id, bin_set order by bin_index
        rows between unbounded preceding and unbounded following
    ) as change_from_first_bin,
    row_number() over (
        partition by model_id, metric_name order by priority desc, bin_set
    ) = 1 as is_preferred_metric
from joined
