-- Energy per model and RoPE band (docs/metrics/rope.md): for every head the band's share of the
-- query and key energy (int_rope_band_head_energy: sum over the band's planes of the plane
-- shares, 0 for a head without a plane in the band), then the mean over the model's heads (so
-- the shares of a model's bands sum to 1), with the layer-cluster bootstrap interval of each
-- mean from model_metric_ci (metrics rope_q_energy_share_<band>, rope_k_energy_share_<band>).
-- With the band's planes per head, its wavelength range and the mean over heads of the band's
-- logit contribution (sum over its planes of logit_mean).
with head_band as (
    select * from {{ ref('int_rope_band_head_energy') }}
),

models as (
    select model_id, family, label from {{ ref('int_models') }}
),

ci as (
    select model_id, metric, ci_low, ci_high
    from {{ ref('model_metric_ci') }}
    where metric like 'rope\_%\_energy\_share\_%' escape '\'
),

bands as (
    select
        h.model_id,
        m.label,
        m.family,
        h.band,
        {{ rope_band_order('h.band') }} as band_order,
        count(*) filter (where h.n_planes > 0) as n_heads,
        count(*) as n_heads_model,
        min(h.n_planes) filter (where h.n_planes > 0) as n_planes_min,
        max(h.n_planes) as n_planes,
        min(h.wavelength_min) as wavelength_min,
        max(h.wavelength_max) as wavelength_max,
        avg(h.q_energy_share) as q_energy_share,
        avg(h.k_energy_share) as k_energy_share,
        avg(h.q_energy) as q_energy,
        avg(h.k_energy) as k_energy,
        avg(h.logit_mean) as logit_mean
    from head_band as h
    join models as m using (model_id)
    group by h.model_id, m.label, m.family, h.band
)

select
    b.*,
    q.ci_low as q_energy_share_ci_low,
    q.ci_high as q_energy_share_ci_high,
    k.ci_low as k_energy_share_ci_low,
    k.ci_high as k_energy_share_ci_high
from bands as b
left join ci as q on q.model_id = b.model_id and q.metric = 'rope_q_energy_share_' || b.band
left join ci as k on k.model_id = b.model_id and k.metric = 'rope_k_energy_share_' || b.band
-- a stable row order for readers that select without ORDER BY
order by model_id, {{ rope_band_order('band') }}
