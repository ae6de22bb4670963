-- Plasticity heatmap per model (docs/metrics/aggregation.md#layers-families-components-heatmaps): accumulators pooled over heads and query buckets
-- per (dx_bin, dm_bin); ap_mean = sum_pp / n, NULL (masked) when n < var('heatmap_n_min').
-- Axes in tokens: bin start = bin * bucket size W.
with cells as (
    select
        h.model_id,
        h.dx_bin,
        h.dm_bin,
        cast(sum(h.n) as bigint) as n,
        sum(h.sum_pp) as sum_pp,
        sum(h.sum_pp2) as sum_pp2,
        count(distinct (h.layer, h.q_head)) as n_heads,
        count(*) as n_cells
    from {{ ref('stg_plasticity_heatmap') }} as h
    group by h.model_id, h.dx_bin, h.dm_bin
)

select
    c.model_id,
    c.dx_bin,
    c.dm_bin,
    m.bucket_size as bin_width_tokens,
    c.dx_bin * m.bucket_size as dx_tokens,
    c.dm_bin * m.bucket_size as dm_tokens,
    c.n,
    c.n_heads,
    c.n_cells,
    c.sum_pp,
    c.sum_pp2,
    (c.n < {{ var('heatmap_n_min') }}) as masked,
    case when c.n >= {{ var('heatmap_n_min') }} and c.n > 0 then c.sum_pp / c.n end as ap_mean,
    case when c.n >= {{ var('heatmap_n_min') }} and c.n > 1
         then sqrt(greatest(c.sum_pp2 / c.n - (c.sum_pp / c.n) * (c.sum_pp / c.n), 0)) end as ap_sd
from cells as c
join {{ ref('int_models') }} as m using (model_id)
-- a stable row order for readers that select without ORDER BY
order by model_id, dx_bin, dm_bin
