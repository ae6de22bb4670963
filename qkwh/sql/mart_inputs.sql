-- What the marts read for each model, as one hash (inputs_state): its catalog row and, per
-- analysis, the current parameter set with how many heads it holds and when it was last
-- written.  `qkwh build` stores it in mart_builds.inputs_json; a model whose hash differs later has stale
-- marts.  Also the times shown by `qkwh status`.
WITH cur AS (
    SELECT cc.model_id, cc.analysis, cc.config_id,
           count(hr.q_head) AS n_heads, max(hr.computed_at) AS last_computed_at
    FROM current_config AS cc
    LEFT JOIN head_runs AS hr
           ON hr.model_id = cc.model_id AND hr.analysis = cc.analysis AND hr.config_id = cc.config_id
    GROUP BY ALL
)
SELECT m.model_id,
       md5(concat_ws('|', m.source_fingerprint, CAST(m.ingested_at AS VARCHAR), coalesce(m.family, ''),
                     coalesce(m.label, ''),
                     coalesce((SELECT string_agg(concat_ws(':', c.analysis, c.config_id, c.n_heads,
                                                           CAST(c.last_computed_at AS VARCHAR)), ','
                                                 ORDER BY c.analysis)
                               FROM cur AS c WHERE c.model_id = m.model_id), ''))) AS inputs_state,
       m.ingested_at,
       (SELECT max(c.last_computed_at) FROM cur AS c WHERE c.model_id = m.model_id) AS results_at
FROM models AS m
ORDER BY m.model_id
