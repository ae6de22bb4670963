-- delta_* in bias_decomposition is the difference to the checkpoint ranked immediately before
-- in the same family (and previous_model_id is that checkpoint).
select b.model_id, b.previous_model_id, p.model_id as expected_previous
from {{ ref('bias_decomposition') }} as b
left join {{ ref('bias_decomposition') }} as p
    on b.is_checkpoint and p.is_checkpoint and p.family = b.family
   and p.trajectory_rank = b.trajectory_rank - 1
where b.previous_model_id is distinct from p.model_id
   or abs(b.delta_bias_strength - (b.bias_strength - p.bias_strength)) > 1e-15
   or abs(b.delta_mu_q_a - (b.mu_q_a - p.mu_q_a)) > 1e-12
