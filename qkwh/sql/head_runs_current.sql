-- What was computed for each head, analysis and parameter set (every set, not only the current
-- one): a head is skipped when this run's set has rows from the same inputs.
-- $1 = list of model ids, or NULL.
SELECT model_id, layer, q_head, analysis, config_id, input_fingerprint
FROM head_runs
WHERE $1 IS NULL OR list_contains($1, model_id)
