-- One row per head and estimator (gaussian / empirical) with the head aggregates of
-- docs/metrics/aggregation.md#head-plasticity-profile, derived here from the buckets (the one place they are computed): the
-- n-weighted ap_overall with its sampling SE, deciles, quintiles, first / last 20 % and drop.
-- Heads that compute analysed but that have no bucket get a gaussian row of NULLs.
with deciles as (
    select * from {{ ref('int_head_deciles') }}
),

bucket_heads as (
    select
        model_id, layer, q_head, estimator,
        any_value(k_head) as k_head,
        sum(weight * ap) filter (where is_valid) / sum(weight) filter (where is_valid)
            as ap_overall,
        -- buckets draw their pairs independently: Var(sum w_j AP_j / W) = sum w_j^2 se_j^2 / W^2
        sqrt(sum(weight * weight * ap_se * ap_se) filter (where is_valid))
            / sum(weight) filter (where is_valid) as ap_overall_sampled_se,
        count(*) filter (where is_valid) as n_buckets_valid,
        count(*) as n_buckets
    from {{ ref('int_plasticity_buckets') }}
    group by model_id, layer, q_head, estimator
),

compute_heads as (
    select model_id, layer, q_head, k_head from {{ ref('stg_plasticity_heads') }}
),

head_keys as (
    select k.*
    from (
        select model_id, layer, q_head, estimator from bucket_heads
        union
        select model_id, layer, q_head, 'gaussian' from compute_heads
    ) as k
    where k.model_id in (select model_id from {{ ref('int_models') }})
),

pivoted as (
    select
        model_id, layer, q_head, estimator,
        {%- for k in range(10) %}
        max(ap) filter (where decile = {{ k }}) as decile_{{ k }}{{ ',' if not loop.last }}
        {%- endfor %}
    from deciles
    group by model_id, layer, q_head, estimator
)

select
    h.model_id,
    h.layer,
    h.q_head,
    h.estimator,
    coalesce(b.k_head, c.k_head) as k_head,
    {{ head_label('h.layer', 'h.q_head') }} as head_label,
    b.ap_overall,
    b.ap_overall_sampled_se,
    coalesce(b.n_buckets_valid, 0) as n_buckets_valid,
    coalesce(b.n_buckets, 0) as n_buckets,
    {%- for k in range(10) %}
    p.decile_{{ k }},
    {%- endfor %}
    {{ plasticity_derived(prefix='p.') }}
from head_keys as h
left join bucket_heads as b using (model_id, layer, q_head, estimator)
left join compute_heads as c using (model_id, layer, q_head)
left join pivoted as p using (model_id, layer, q_head, estimator)
