-- config_id -> name of every named parameter set (`qkwh runs use` says which set is current).
SELECT config_id, name FROM run_config WHERE name IS NOT NULL
