-- What was last computed for each head and analysis.  $1 = list of model ids, or NULL.
SELECT model_id, layer, q_head, analysis, config_id, input_fingerprint
FROM head_runs
WHERE $1 IS NULL OR list_contains($1, model_id)
