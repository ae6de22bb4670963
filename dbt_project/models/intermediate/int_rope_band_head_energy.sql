-- One row per head with RoPE results and band its model has (docs/metrics/rope.md): the band's
-- share of the head's query and key energy (sum over the band's planes of the plane shares),
-- 0 for a head without a plane in the band (a NoPE layer has only unrotated dims), so the
-- shares of a head's bands sum to 1; with the band's planes, raw energies, logit contribution
-- and wavelength range (NULL where the head has no plane in the band).  The head-level source
-- of rope_band_energy and of the rope_*_energy_share_* metrics of model_metric_ci.
with planes as (
    select p.*
    from {{ ref('stg_rope_planes') }} as p
    where p.model_id in (select model_id from {{ ref('int_models') }})
),

head_band as (
    select
        model_id, layer, q_head, band,
        count(*) as n_planes,
        sum(q_energy_share order by plane) as q_energy_share,
        sum(k_energy_share order by plane) as k_energy_share,
        sum(q_energy order by plane) as q_energy,
        sum(k_energy order by plane) as k_energy,
        sum(logit_mean order by plane) as logit_mean,
        min(wavelength) as wavelength_min,
        max(wavelength) as wavelength_max
    from planes
    group by model_id, layer, q_head, band
),

heads as (
    select distinct model_id, layer, q_head from planes
),

grid as (
    -- every head of the model against every band the model has
    select h.model_id, h.layer, h.q_head, b.band
    from heads as h
    join (select distinct model_id, band from planes) as b using (model_id)
)

select
    g.model_id,
    g.layer,
    g.q_head,
    g.band,
    coalesce(hb.n_planes, 0) as n_planes,
    coalesce(hb.q_energy_share, 0) as q_energy_share,
    coalesce(hb.k_energy_share, 0) as k_energy_share,
    hb.q_energy,
    hb.k_energy,
    hb.logit_mean,
    hb.wavelength_min,
    hb.wavelength_max
from grid as g
left join head_band as hb using (model_id, layer, q_head, band)
