-- The head_runs rows of one written batch, from one list per column (same length, row i of each).
-- $1 model_id, $2 layer, $3 q_head, $4 analysis, $5 config_id, $6 input_fingerprint (lists),
-- $7 computed_at (one timestamp for the batch), $8 seconds (list).
INSERT INTO head_runs (model_id, layer, q_head, analysis, config_id, input_fingerprint, computed_at, seconds)
SELECT UNNEST($1::VARCHAR[]), UNNEST($2::INTEGER[]), UNNEST($3::INTEGER[]), UNNEST($4::VARCHAR[]),
       UNNEST($5::VARCHAR[]), UNNEST($6::VARCHAR[]), $7::TIMESTAMP, UNNEST($8::DOUBLE[])
