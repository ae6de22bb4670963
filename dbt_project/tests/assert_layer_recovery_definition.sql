-- layer_profile: recovery = mean(d6, d7) - mean(d4, d5); shows_recovery uses the threshold var.
select model_id, layer, recovery, shows_recovery
from {{ ref('layer_profile') }}
where (recovery is null) <> ((decile_6 + decile_7 - decile_4 - decile_5) is null)
   or abs(recovery - ((decile_6 + decile_7) / 2 - (decile_4 + decile_5) / 2)) > 1e-12
   or shows_recovery is distinct from (recovery > {{ var('recovery_threshold') }})
