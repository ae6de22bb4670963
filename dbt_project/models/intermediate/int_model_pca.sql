-- Model-level PCA summary (spec §4): per-pc means of explained variance and canonicalised
-- correlations over heads, head-level PCA means, and the spread of the PC0 statistics that the
-- training-trajectory figures plot (mean +- sd).
with comps as (
    select c.*
    from {{ ref('stg_pca_components') }} as c
    where c.model_id in (select model_id from {{ ref('int_models') }})
),

per_pc as (
    select
        model_id,
        {%- for k in range(10) %}
        avg(explained_variance_ratio) filter (where pc = {{ k }}) as ev_{{ k }},
        avg(r_q) filter (where pc = {{ k }}) as r_q_{{ k }},
        avg(r_k) filter (where pc = {{ k }}) as r_k_{{ k }},
        {%- endfor %}
        avg(abs(r_k)) filter (where pc = 0) as abs_r_k_0
    from comps
    group by model_id
),

heads as (
    select * from {{ ref('int_head_metrics') }} where has_pca
),

per_head as (
    select
        model_id,
        count(*) as n_heads_pca,
        avg(r_q0) as r_q0_mean,
        stddev_samp(r_q0) as r_q0_sd,
        avg(r_k0) as r_k0_mean,
        stddev_samp(r_k0) as r_k0_sd,
        avg(ev0) as ev0_mean,
        stddev_samp(ev0) as ev0_sd,
        avg(pos_var_q_thesis) as pos_var_q_thesis,
        avg(pos_var_k_thesis) as pos_var_k_thesis,
        avg(pc0_share_pos_q) as pc0_share_pos_q,
        avg(pc0_share_pos_k) as pc0_share_pos_k,
        avg(pos_var_q_exact) as pos_var_q_exact,
        avg(pos_var_k_exact) as pos_var_k_exact,
        avg(qk_sep_pc0) as qk_sep_pc0,
        avg(fisher_pc0) as fisher_pc0,
        avg(qk_acc_pc01) as qk_acc_pc01,
        {%- for t in ['position_dominated', 'q_positional', 'k_positional', 'content_focused', 'mixed'] %}
        avg(case when taxonomy = '{{ t }}' then 1.0 when taxonomy is not null then 0.0 end)
            as frac_{{ t }}{{ ',' if not loop.last }}
        {%- endfor %}
    from heads
    group by model_id
)

select
    h.*,
    {%- for k in range(10) %}
    p.ev_{{ k }},
    p.r_q_{{ k }},
    p.r_k_{{ k }},
    {%- endfor %}
    p.abs_r_k_0
from per_head as h
left join per_pc as p using (model_id)
