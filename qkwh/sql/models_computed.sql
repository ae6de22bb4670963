-- Heads computed per model and analysis in the analysis's current parameter set (one head_runs
-- row per head, analysis and set, written with the head's results).
SELECT r.model_id, r.analysis, count(*) AS n_heads
FROM head_runs AS r
JOIN current_config AS c USING (model_id, analysis, config_id)
GROUP BY ALL
