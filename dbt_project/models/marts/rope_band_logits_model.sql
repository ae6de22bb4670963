-- The logit contribution of each RoPE band against query-key distance, per model (docs/metrics/
-- rope.md): every head's pairs of a distance bin pooled, n, sum and sum of squares added
-- (in head order, so the sums are reproducible), then mean = sum / n and the sample sd
-- sqrt((sum_sq - sum^2 / n) / (n - 1)).  Distances in tokens from the bin and the bucket size.
with logits as (
    select l.*
    from {{ ref('stg_rope_band_logits') }} as l
    where l.model_id in (select model_id from {{ ref('int_models') }})
),

pooled as (
    select
        model_id,
        band,
        distance_bin,
        count(*) as n_heads,
        count(distinct layer) as n_layers,
        cast(sum(n_pairs) as bigint) as n_pairs,
        sum(logit_sum order by layer, q_head) as logit_sum,
        sum(logit_sum_sq order by layer, q_head) as logit_sum_sq
    from logits
    group by model_id, band, distance_bin
),

models as (
    select model_id, family, label, bucket_size from {{ ref('int_models') }}
)

select
    p.model_id,
    m.label,
    m.family,
    p.band,
    {{ rope_band_order('p.band') }} as band_order,
    p.distance_bin,
    p.distance_bin * m.bucket_size as distance_lo,
    (p.distance_bin + 1) * m.bucket_size as distance_hi,
    p.n_heads,
    p.n_layers,
    p.n_pairs,
    p.logit_sum,
    p.logit_sum_sq,
    p.logit_sum / nullif(p.n_pairs, 0) as logit_mean,
    case when p.n_pairs > 1
         then sqrt(greatest((p.logit_sum_sq - p.logit_sum * p.logit_sum / p.n_pairs) / (p.n_pairs - 1), 0))
    end as logit_sd
from pooled as p
join models as m using (model_id)
-- a stable row order for readers that select without ORDER BY
order by model_id, {{ rope_band_order('band') }}, distance_bin
