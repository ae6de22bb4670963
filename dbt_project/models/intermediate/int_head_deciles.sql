-- Head decile values (docs/metrics/aggregation.md#head-plasticity-profile) per estimator: for decile k the n_j-weighted mean of the
-- bucket AP over the head's valid buckets with floor(10 f_j) = k.  Deciles without a valid
-- bucket have no row.
{{ plasticity_head_deciles(ref('int_plasticity_buckets')) }}
