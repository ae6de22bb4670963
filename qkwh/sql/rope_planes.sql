-- The RoPE planes of every (model, layer) in the catalog, for the rope analysis (columns in the
-- order qkwh.compute.frequencies reads them).  Models whose frequencies are unknown have no rows.
-- $1 = list of model ids, or NULL for every model.
SELECT model_id, layer, plane, dim_a, coalesce(dim_b, -1) AS dim_b, inv_freq, wavelength, band,
       layout, source
FROM rope_frequencies
WHERE $1 IS NULL OR list_contains($1, model_id)
ORDER BY model_id, layer, plane
