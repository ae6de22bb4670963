-- `qkwh status`: per model, what is ingested (files, heads, analysable heads, when) and the
-- dataset its capture ran on.
SELECT m.model_id,
       m.n_files,
       (SELECT count(*) FROM heads AS h WHERE h.model_id = m.model_id) AS n_heads,
       (SELECT count(*) FROM heads AS h WHERE h.model_id = m.model_id AND h.has_k_file) AS n_analysable,
       m.ingested_at,
       m.dataset
FROM models AS m
ORDER BY m.model_id
