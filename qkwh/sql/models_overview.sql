-- `qkwh models`: one line per model with catalog counts and how many heads each analysis covers
-- (in its current parameter set; `qkwh runs` lists every set).
SELECT m.model_id,
       m.label,
       m.family,
       m.source_kind AS source,
       m.n_files AS files,
       m.n_rows AS "rows",
       (SELECT count(*) FROM heads h WHERE h.model_id = m.model_id) AS heads,
       (SELECT count(*) FROM heads h WHERE h.model_id = m.model_id AND h.has_k_file) AS with_k,
       m.head_dim AS d,
       m.context_length AS l_ctx,
       m.bucket_size AS bucket,
       (SELECT count(*) FROM pca_heads r JOIN current_config c ON c.model_id = r.model_id AND c.analysis = 'pca'
        AND c.config_id = r.config_id WHERE r.model_id = m.model_id) AS pca,
       (SELECT count(*) FROM rotation_heads r JOIN current_config c ON c.model_id = r.model_id AND c.analysis = 'rotation'
        AND c.config_id = r.config_id WHERE r.model_id = m.model_id) AS rotation,
       (SELECT count(*) FROM plasticity_heads r JOIN current_config c ON c.model_id = r.model_id AND c.analysis = 'plasticity'
        AND c.config_id = r.config_id WHERE r.model_id = m.model_id) AS plasticity,
       (SELECT count(*) FROM ingest_findings f WHERE f.model_id = m.model_id AND f.severity <> 'info') AS warnings
FROM models AS m
ORDER BY m.model_id
