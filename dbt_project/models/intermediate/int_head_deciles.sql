-- Head decile values (docs/metrics/aggregation.md#head-plasticity-profile) per estimator: for decile k the n_j-weighted mean of the
-- bucket AP over the head's valid buckets with floor(10 f_j) = k.  Deciles without a valid
-- bucket have no row.
select
    model_id,
    layer,
    q_head,
    estimator,
    any_value(k_head) as k_head,
    decile,
    sum(weight * ap) / sum(weight) as ap,
    count(*) as n_buckets,
    sum(weight) as n_queries
from {{ ref('int_plasticity_buckets') }}
where is_valid and decile is not null
group by model_id, layer, q_head, estimator, decile
