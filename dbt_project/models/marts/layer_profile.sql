-- Per-layer profile (docs/metrics/aggregation.md#layers-families-components-heatmaps): mean over the layer's heads
-- of the head deciles, ap_overall, q_beta_norm, q_R2_pos and PCA / rotation means; recovery =
-- mean(d6, d7) - mean(d4, d5); NoPE and cross-attention flags and NoPE adjacency.
with heads as (
    select * from {{ ref('head_metrics') }}
),

models as (
    select * from {{ ref('int_models') }}
),

agg as (
    select
        model_id,
        layer,
        count(*) as n_heads,
        count(*) filter (where has_plasticity) as n_heads_plasticity,
        {%- for k in range(10) %}
        avg(decile_{{ k }}) as decile_{{ k }},
        {%- endfor %}
        avg(ap_overall) as ap_overall,
        avg(q_beta_norm) as q_beta_norm,
        avg(q_R2_pos) as q_R2_pos,
        avg(r_q0) as r_q0,
        avg(r_k0) as r_k0,
        avg(abs_r_k_a) as abs_r_k_a,
        avg(abs_r_q_a) as abs_r_q_a,
        avg(bias_strength) as bias_strength
    from heads
    group by model_id, layer
),

flagged as (
    select
        a.*,
        m.family,
        m.num_layers,
        {{ depth('a.layer', 'm.num_layers') }} as depth,
        {{ depth_bin('a.layer', 'm.num_layers') }} as depth_bin,
        list_contains(m.nope_layer_list, a.layer) as is_nope,
        list_contains(m.cross_attention_layer_list, a.layer) as is_cross_attention,
        list_concat(m.nope_layer_list, m.cross_attention_layer_list) as no_rope_layers
    from agg as a
    join models as m using (model_id)
)

select
    model_id,
    layer,
    family,
    num_layers,
    depth,
    depth_bin,
    n_heads,
    n_heads_plasticity,
    {%- for k in range(10) %}
    decile_{{ k }},
    {%- endfor %}
    {{ mean2('decile_0', 'decile_1') }} as decile_0_1_mean,
    {{ mean2('decile_4', 'decile_5') }} as decile_4_5_mean,
    {{ mean2('decile_6', 'decile_7') }} as decile_6_7_mean,
    {{ mean2('decile_8', 'decile_9') }} as decile_8_9_mean,
    {{ mean2('decile_6', 'decile_7') }} - {{ mean2('decile_4', 'decile_5') }} as recovery,
    ({{ mean2('decile_6', 'decile_7') }} - {{ mean2('decile_4', 'decile_5') }})
        > {{ var('recovery_threshold') }} as shows_recovery,
    ap_overall,
    q_beta_norm,
    q_R2_pos,
    r_q0,
    r_k0,
    abs_r_k_a,
    abs_r_q_a,
    bias_strength,
    is_nope,
    is_cross_attention,
    case
        when is_nope then 'nope'
        when is_cross_attention then 'cross_attention'
        when list_contains(no_rope_layers, layer + 1) then 'before_no_rope'
        when list_contains(no_rope_layers, layer - 1) then 'after_no_rope'
        else 'rope'
    end as nope_adjacency
from flagged
-- a stable row order for readers that select without ORDER BY
order by model_id, layer
