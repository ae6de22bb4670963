-- RoPE band plasticity buckets in long form, one row per (head, band, variant, bucket,
-- estimator): the same framing as int_plasticity_buckets (macro plasticity_buckets_long): f_j,
-- decile, validity and weight n_j.
{{ plasticity_buckets_long(ref('stg_rope_band_plasticity')) }}
