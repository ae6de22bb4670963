-- Head decile values of RoPE band plasticity per band, variant and estimator, exactly as the
-- full head's int_head_deciles (macro plasticity_head_deciles).
{{ plasticity_head_deciles(ref('int_rope_band_buckets'), keys=['band', 'variant']) }}
