-- Cross-check: the head deciles dbt computes from plasticity_buckets (int_head_plasticity) equal
-- the ones compute wrote to plasticity_heads (spec §2.3.8 for one head), to 1e-9; a decile one
-- side has and the other lacks also fails.  Likewise first/last 20 %, drop and ap_overall.
{%- set cols = ['decile_0', 'decile_1', 'decile_2', 'decile_3', 'decile_4', 'decile_5', 'decile_6',
                'decile_7', 'decile_8', 'decile_9', 'ap_first_20pct', 'ap_last_20pct', 'ap_drop'] %}
with ours as (
    select * from {{ ref('int_head_plasticity') }}
),

theirs as (
    select * from {{ ref('stg_plasticity_heads') }}
),

pairs as (
    {%- for c in cols %}
    select o.model_id, o.layer, o.q_head, '{{ c }}' as metric, o.{{ c }} as ours, t.{{ c }} as theirs
    from ours as o
    join theirs as t using (model_id, layer, q_head)
    union all
    {%- endfor %}
    select o.model_id, o.layer, o.q_head, 'ap_overall', o.ap_overall_buckets, t.ap_overall
    from ours as o
    join theirs as t using (model_id, layer, q_head)
)

select *
from pairs
where (ours is null) <> (theirs is null)
   or abs(ours - theirs) > 1e-9
