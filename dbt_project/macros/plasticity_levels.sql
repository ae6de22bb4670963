{#
  The three levels of plasticity below the model (docs/metrics/aggregation.md), written once and
  used by the full head (int_plasticity_buckets, int_head_deciles, int_head_plasticity: no extra
  keys) and by the RoPE bands (int_rope_band_buckets, int_rope_band_deciles,
  int_rope_band_head_plasticity: keys band, variant).  `keys` are the columns that split a head
  into several plasticity profiles; every aggregate groups by the head, the keys and the
  estimator.
#}

{#
  Buckets in long form, one row per bucket and estimator (see int_plasticity_buckets.yml), from a
  relation with the columns of plasticity_buckets (plus any keys, passed through).
#}
{% macro plasticity_buckets_long(buckets_relation) -%}
with buckets as (
    select * from {{ buckets_relation }}
),

models as (
    select model_id, context_length from {{ ref('int_models') }}
),

framed as (
    select
        b.*,
        coalesce(b.bucket_frac, b.bucket_position / nullif(m.context_length, 0)) as f
    from buckets as b
    join models as m using (model_id)
),

estimates as (
    {%- for e in plasticity_estimators() %}
    select
        framed.*,
        '{{ e.name }}' as estimator,
        {{ e.ap }} as ap,
        {{ e.se }} as ap_se
    from framed
    {%- if e.name != 'gaussian' %}
    where {{ e.ap }} is not null
    {%- endif %}
    {{ 'union all' if not loop.last }}
    {%- endfor %}
)

select
    *,
    cast(least(greatest(floor(10 * f), 0), 9) as integer) as decile,
    (ap is not null and n_queries > 0) as is_valid,
    case when ap is not null and n_queries > 0 then cast(n_queries as double) end as weight
from estimates
{%- endmacro %}

{# ", k1, k2" for the extra keys (empty without keys); `alias` prefixes each. #}
{% macro key_list(keys, alias='') -%}
    {%- for k in keys %}, {{ alias }}{{ k }}{% endfor -%}
{%- endmacro %}

{#
  Head decile values per estimator (and keys): for decile k the n_j-weighted mean of the bucket
  AP over the valid buckets with floor(10 f_j) = k.  Deciles without a valid bucket have no row.
#}
{% macro plasticity_head_deciles(buckets_relation, keys=[]) -%}
select
    model_id,
    layer,
    q_head{{ key_list(keys) }},
    estimator,
    any_value(k_head) as k_head,
    decile,
    sum(weight * ap) / sum(weight) as ap,
    count(*) as n_buckets,
    sum(weight) as n_queries
from {{ buckets_relation }}
where is_valid and decile is not null
group by model_id, layer, q_head{{ key_list(keys) }}, estimator, decile
{%- endmacro %}

{#
  One row per head (and keys) and estimator with the head aggregates: the n-weighted ap_overall
  with its sampling SE, deciles, quintiles, first / last 20 % and drop.  `heads_relation`
  (optional; model_id, layer, q_head, k_head) lists heads that compute analysed: those without
  a bucket get a gaussian row of NULLs (only without keys).
#}
{% macro plasticity_head_profile(deciles_relation, buckets_relation, keys=[], heads_relation=none) -%}
with deciles as (
    select * from {{ deciles_relation }}
),

bucket_heads as (
    select
        model_id, layer, q_head{{ key_list(keys) }}, estimator,
        any_value(k_head) as k_head,
        sum(weight * ap) filter (where is_valid) / sum(weight) filter (where is_valid)
            as ap_overall,
        -- buckets draw their pairs independently: Var(sum w_j AP_j / W) = sum w_j^2 se_j^2 / W^2
        sqrt(sum(weight * weight * ap_se * ap_se) filter (where is_valid))
            / sum(weight) filter (where is_valid) as ap_overall_sampled_se,
        count(*) filter (where is_valid) as n_buckets_valid,
        count(*) as n_buckets
    from {{ buckets_relation }}
    group by model_id, layer, q_head{{ key_list(keys) }}, estimator
),
{%- if heads_relation is not none %}

compute_heads as (
    select model_id, layer, q_head, k_head from {{ heads_relation }}
),
{%- endif %}

head_keys as (
    select k.*
    from (
        select model_id, layer, q_head{{ key_list(keys) }}, estimator from bucket_heads
        {%- if heads_relation is not none %}
        union
        select model_id, layer, q_head, 'gaussian' from compute_heads
        {%- endif %}
    ) as k
    where k.model_id in (select model_id from {{ ref('int_models') }})
),

pivoted as (
    select
        model_id, layer, q_head{{ key_list(keys) }}, estimator,
        {%- for k in range(10) %}
        max(case when decile = {{ k }} then ap end) as decile_{{ k }}{{ ',' if not loop.last }}
        {%- endfor %}
    from deciles
    group by model_id, layer, q_head{{ key_list(keys) }}, estimator
)

select
    h.model_id,
    h.layer,
    h.q_head{{ key_list(keys, 'h.') }},
    h.estimator,
    {%- if heads_relation is not none %}
    coalesce(b.k_head, c.k_head) as k_head,
    {%- else %}
    b.k_head,
    {%- endif %}
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
left join bucket_heads as b using (model_id, layer, q_head{{ key_list(keys) }}, estimator)
{%- if heads_relation is not none %}
left join compute_heads as c using (model_id, layer, q_head)
{%- endif %}
left join pivoted as p using (model_id, layer, q_head{{ key_list(keys) }}, estimator)
{%- endmacro %}
