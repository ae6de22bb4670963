-- One row per head, band, variant and estimator with the head aggregates of RoPE band
-- plasticity (ap_overall with its sampling SE, deciles, quintiles, first / last 20 %, drop),
-- exactly as the full head's int_head_plasticity (macro plasticity_head_profile).
{{ plasticity_head_profile(ref('int_rope_band_deciles'), ref('int_rope_band_buckets'),
                            keys=['band', 'variant']) }}
