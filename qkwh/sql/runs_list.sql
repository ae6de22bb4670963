-- `qkwh runs`: one row per model, analysis and parameter set held, with its parameters, how many
-- heads it covers out of the model's analysable heads, when it was created and last written,
-- and whether it is the set the marts report (current_config).  $1 = list of model ids or NULL.
WITH analysable AS (
    SELECT model_id, count(*) AS n_analysable FROM heads WHERE has_k_file GROUP BY model_id
), sets AS (
    SELECT model_id, analysis, config_id, count(*) AS n_heads, max(computed_at) AS last_computed_at
    FROM head_runs
    WHERE $1 IS NULL OR list_contains($1, model_id)
    GROUP BY ALL
)
SELECT s.model_id,
       s.analysis,
       s.config_id,
       rc.name,
       s.n_heads,
       coalesce(a.n_analysable, 0) AS n_analysable,
       s.n_heads < coalesce(a.n_analysable, 0) AS partial,
       cc.config_id IS NOT NULL AS is_current,
       rc.created_at,
       s.last_computed_at,
       rc.code_version,
       rc.params_json
FROM sets AS s
LEFT JOIN run_config AS rc USING (config_id)
LEFT JOIN analysable AS a USING (model_id)
LEFT JOIN current_config AS cc
       ON cc.model_id = s.model_id AND cc.analysis = s.analysis AND cc.config_id = s.config_id
ORDER BY s.model_id, s.analysis, rc.created_at, s.config_id
