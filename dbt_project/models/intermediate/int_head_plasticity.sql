-- One row per head with plasticity: deciles (from buckets), quintiles, first/last 20 %, drop
-- (spec §2.3.8 for one head) and the n-weighted ap_overall, all derived here from the buckets
-- (the one place they are computed), next to compute's head diagnostics.
with deciles as (
    select * from {{ ref('int_head_deciles') }}
),

bucket_heads as (
    select
        model_id, layer, q_head,
        any_value(k_head) as k_head,
        sum(weight * ap_bucket) filter (where is_valid) / sum(weight) filter (where is_valid)
            as ap_overall,
        count(*) filter (where is_valid) as n_buckets_valid,
        count(*) as n_buckets
    from {{ ref('int_plasticity_buckets') }}
    group by model_id, layer, q_head
),

compute_heads as (
    select * from {{ ref('stg_plasticity_heads') }}
),

head_keys as (
    select k.*
    from (
        select model_id, layer, q_head from bucket_heads
        union
        select model_id, layer, q_head from compute_heads
    ) as k
    where k.model_id in (select model_id from {{ ref('int_models') }})
),

pivoted as (
    select
        model_id, layer, q_head,
        {%- for k in range(10) %}
        max(ap) filter (where decile = {{ k }}) as decile_{{ k }}{{ ',' if not loop.last }}
        {%- endfor %}
    from deciles
    group by model_id, layer, q_head
)

select
    h.model_id,
    h.layer,
    h.q_head,
    coalesce(b.k_head, c.k_head) as k_head,
    {{ head_label('h.layer', 'h.q_head') }} as head_label,
    b.ap_overall,
    coalesce(b.n_buckets_valid, 0) as n_buckets_valid,
    coalesce(b.n_buckets, 0) as n_buckets,
    {%- for k in range(10) %}
    p.decile_{{ k }},
    {%- endfor %}
    {%- for k in range(5) %}
    {{ mean2('p.decile_' ~ (2 * k), 'p.decile_' ~ (2 * k + 1)) }} as quintile_{{ k }},
    {%- endfor %}
    {{ mean2('p.decile_0', 'p.decile_1') }} as ap_first_20pct,
    {{ mean2('p.decile_8', 'p.decile_9') }} as ap_last_20pct,
    {{ mean2('p.decile_0', 'p.decile_1') }} - {{ mean2('p.decile_8', 'p.decile_9') }} as ap_drop,
    c.q_beta_norm,
    c.q_R2_pos,
    c.d
from head_keys as h
left join bucket_heads as b using (model_id, layer, q_head)
left join compute_heads as c using (model_id, layer, q_head)
left join pivoted as p using (model_id, layer, q_head)
