-- Head value per absolute-position bin (docs/metrics/aggregation.md#length-bins-absolute-positions): the n_j-weighted mean AP over the head's
-- valid buckets whose tau_j lies in [lo_tokens, hi_tokens) (or = hi_tokens when hi_inclusive).
-- Gaussian estimator only (the published bins).
with buckets as (
    select * from {{ ref('int_plasticity_buckets') }}
    where estimator = 'gaussian' and is_valid and bucket_position is not null
),

bins as (
    select s.model_id, b.*
    from {{ ref('int_model_bin_sets') }} as s
    join {{ ref('plasticity_bins') }} as b using (bin_set)
)

select
    k.model_id,
    k.layer,
    k.q_head,
    any_value(k.k_head) as k_head,
    b.bin_set,
    b.bin_index,
    sum(k.weight * k.ap) / sum(k.weight) as ap,
    count(*) as n_buckets,
    sum(k.weight) as n_queries,
    sum(k.weight * k.bucket_position) / sum(k.weight) as mean_position
from buckets as k
join bins as b
    on b.model_id = k.model_id
   and k.bucket_position >= b.lo_tokens
   and (k.bucket_position < b.hi_tokens or (b.hi_inclusive and k.bucket_position = b.hi_tokens))
group by k.model_id, k.layer, k.q_head, b.bin_set, b.bin_index
