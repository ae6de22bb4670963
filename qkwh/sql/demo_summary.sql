-- `qkwh demo`: headline numbers of the models $1 (a list of ids), read from the marts `qkwh build` wrote.
SELECT s.model_id,
       s.n_heads AS heads,
       (SELECT mode(t.taxonomy) FROM head_taxonomy AS t WHERE t.model_id = s.model_id) AS taxonomy,
       s.abs_r_k_a,
       s.bias_strength,
       s.ap_overall,
       s.ap_drop
FROM model_summary AS s
WHERE s.model_id IN (SELECT unnest($1::VARCHAR[]))
ORDER BY s.model_id
