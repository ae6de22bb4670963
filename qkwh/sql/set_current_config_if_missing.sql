-- Make a parameter set the one the marts report for (model_id, analysis) when none is yet
-- (`qkwh compute --keep-current`).
-- $1 model_id, $2 analysis, $3 config_id, $4 timestamp.
INSERT INTO current_config (model_id, analysis, config_id, set_at)
VALUES ($1, $2, $3, $4)
ON CONFLICT (model_id, analysis) DO NOTHING
