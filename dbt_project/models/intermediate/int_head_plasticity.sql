-- One row per head and estimator (gaussian / empirical) with the head aggregates of
-- docs/metrics/aggregation.md#head-plasticity-profile, derived here from the buckets (macro plasticity_head_profile, shared with the RoPE bands): the
-- n-weighted ap_overall with its sampling SE, deciles, quintiles, first / last 20 % and drop.
-- Heads that compute analysed but that have no bucket get a gaussian row of NULLs.
{{ plasticity_head_profile(ref('int_head_deciles'), ref('int_plasticity_buckets'),
                            heads_relation=ref('stg_plasticity_heads')) }}
