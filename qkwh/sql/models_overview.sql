-- `qkwh models`: one line per model with catalog counts.  The per-analysis columns (heads each
-- registered analysis covers in its current parameter set, from qkwh/sql/models_computed.sql)
-- are inserted before `warnings` by qkwh.status.models_overview.
SELECT m.model_id,
       coalesce(m.label, m.model_id) AS label,  -- as the marts show it (int_models)
       m.family,
       m.dataset,
       m.source_kind AS source,
       m.n_files AS files,
       m.n_rows AS "rows",
       (SELECT count(*) FROM heads h WHERE h.model_id = m.model_id) AS heads,
       (SELECT count(*) FROM heads h WHERE h.model_id = m.model_id AND h.has_k_file) AS with_k,
       m.head_dim AS d,
       m.context_length AS l_ctx,
       m.bucket_size AS bucket,
       (SELECT count(*) FROM ingest_findings f WHERE f.model_id = m.model_id AND f.severity <> 'info') AS warnings
FROM models AS m
ORDER BY m.model_id
