-- Plasticity buckets in long form, one row per bucket and estimator (gaussian: ap_bucket;
-- empirical: ap_bucket_empirical, only where compute counted it), with the relative position
-- f_j = tau_j / L_ctx, the decile it falls in (floor(10 f_j), clipped to 9; docs/metrics/aggregation.md) and
-- whether it counts in n-weighted means (finite AP and n_queries > 0).
{{ plasticity_buckets_long(ref('stg_plasticity_buckets')) }}
