-- `qkwh demo`: a few headline numbers per model, straight from the per-head tables.
SELECT p.model_id,
       count(*) AS heads,
       mode(p.taxonomy) AS taxonomy,
       avg(abs(r.r_k_a)) AS abs_r_k_a,
       avg(r.bias_strength) AS bias_strength,
       avg(a.ap_overall) AS ap_overall,
       avg(a.ap_first_20pct) - avg(a.ap_last_20pct) AS ap_drop
FROM pca_heads AS p
JOIN rotation_heads AS r USING (model_id, layer, q_head)
JOIN plasticity_heads AS a USING (model_id, layer, q_head)
GROUP BY p.model_id
ORDER BY p.model_id
