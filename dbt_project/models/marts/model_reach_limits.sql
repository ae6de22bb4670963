-- Architectural limits of each model (docs/metrics/reach.md#architectural-limits): up to which
-- length the per-head measurements say anything.  One row per ingested model.
--   measured_context     L_ctx of the capture
--   trained_context      the config's original_max_position_embeddings (under rope scaling),
--                        else max_position_embeddings, with its source
--   windowed_layers, min_window, max_window   from the files' sliding_window, else the config's
--   critical_dim, extrapolation_bound         Liu et al. (2024): 2 x the rotary planes whose
--                        wavelength 2*pi/inv_freq fits in trained_context, and the wavelength of
--                        the first plane past it (from the resolved inv_freq, every rope type)
with models as (
    select
        model_id,
        context_length,
        try_cast(json_extract_string(metadata_json, '$.original_max_position_embeddings') as bigint)
            as original_max,
        try_cast(json_extract_string(metadata_json, '$.max_position_embeddings') as bigint)
            as max_positions,
        try_cast(json_extract_string(metadata_json, '$.model_sliding_window') as bigint)
            as config_window
    from {{ source('qkwh', 'models') }}
),

trained as (
    select
        model_id,
        context_length as measured_context,
        coalesce(original_max, max_positions) as trained_context,
        case
            when original_max is not null then 'original_max_position_embeddings'
            when max_positions is not null then 'max_position_embeddings'
        end as trained_context_source,
        config_window
    from models
),

windows as (
    select
        model_id,
        count(distinct layer) filter (where sliding_window is not null) as windowed_layers,
        min(sliding_window) as min_window,
        max(sliding_window) as max_window
    from {{ source('qkwh', 'files') }}
    group by model_id
),

-- the rotated planes of each layer, against the model's trained context
planes as (
    select f.model_id, f.layer, f.wavelength, t.trained_context
    from {{ source('qkwh', 'rope_frequencies') }} as f
    join trained as t using (model_id)
    where f.dim_b is not null and f.inv_freq > 0 and t.trained_context is not null
),

per_layer as (
    select
        model_id,
        layer,
        2 * count(*) filter (where wavelength <= trained_context) as critical_dim,
        min(wavelength) filter (where wavelength > trained_context) as extrapolation_bound
    from planes
    group by model_id, layer
),

-- layers may differ (per-layer-type RoPE): the smallest critical dimension is the binding one
critical as (
    select
        model_id,
        min(critical_dim) as critical_dim,
        min(extrapolation_bound) as extrapolation_bound
    from per_layer
    group by model_id
)

select
    t.model_id,
    t.measured_context,
    t.trained_context,
    t.trained_context_source,
    coalesce(w.windowed_layers, 0) as windowed_layers,
    coalesce(w.min_window, t.config_window) as min_window,
    coalesce(w.max_window, t.config_window) as max_window,
    c.critical_dim,
    c.extrapolation_bound
from trained as t
left join windows as w using (model_id)
left join critical as c using (model_id)
order by t.model_id
