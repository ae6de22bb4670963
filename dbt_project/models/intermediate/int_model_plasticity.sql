-- Model-level plasticity (spec §2.3.8): decile_k = unweighted mean over heads with a value for
-- that decile; quintiles, first/last 20 % and drop from the model deciles; ap_overall = mean of
-- head ap_overall; NoPE-study decile means and mid-context recovery.
with heads as (
    select * from {{ ref('int_head_plasticity') }}
),

agg as (
    select
        model_id,
        count(*) as n_heads_plasticity,
        avg(ap_overall) as ap_overall,
        {%- for k in range(10) %}
        avg(decile_{{ k }}) as decile_{{ k }},
        count(decile_{{ k }}) as n_heads_decile_{{ k }},
        {%- endfor %}
        avg(q_beta_norm) as q_beta_norm,
        avg(q_R2_pos) as q_R2_pos
    from heads
    group by model_id
)

select
    *,
    {%- for k in range(5) %}
    {{ mean2('decile_' ~ (2 * k), 'decile_' ~ (2 * k + 1)) }} as quintile_{{ k }},
    {%- endfor %}
    {{ mean2('decile_0', 'decile_1') }} as ap_first_20pct,
    {{ mean2('decile_8', 'decile_9') }} as ap_last_20pct,
    {{ mean2('decile_0', 'decile_1') }} - {{ mean2('decile_8', 'decile_9') }} as ap_drop,
    {{ mean2('decile_4', 'decile_5') }} as decile_4_5_mean,
    {{ mean2('decile_6', 'decile_7') }} as decile_6_7_mean,
    {{ mean2('decile_6', 'decile_7') }} - {{ mean2('decile_4', 'decile_5') }} as mid_context_recovery
from agg
