-- 1 when a parameter set is called $1 (`qkwh compute --name N` computes more of it).
SELECT 1 FROM run_config WHERE name = $1 LIMIT 1
