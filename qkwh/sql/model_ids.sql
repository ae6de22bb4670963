-- Every model id of the catalog, sorted (the names an unknown model id is checked against).
SELECT model_id FROM models ORDER BY 1
