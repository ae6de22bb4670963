-- Energy per model and RoPE band (docs/metrics/rope.md): for every head the band's share of the
-- query and key energy (sum over the band's planes of q_energy_share, k_energy_share), then the
-- mean over the model's heads, a head without a plane in the band counting 0 (so the shares of
-- a model's bands sum to 1).  With the band's planes per head, its wavelength range and the mean
-- over heads of the band's logit contribution (sum over its planes of logit_mean).
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
),

models as (
    select model_id, family, label from {{ ref('int_models') }}
)

select
    g.model_id,
    m.label,
    m.family,
    g.band,
    {{ rope_band_order('g.band') }} as band_order,
    count(hb.band) as n_heads,
    count(*) as n_heads_model,
    min(hb.n_planes) as n_planes_min,
    max(hb.n_planes) as n_planes,
    min(hb.wavelength_min) as wavelength_min,
    max(hb.wavelength_max) as wavelength_max,
    avg(coalesce(hb.q_energy_share, 0)) as q_energy_share,
    avg(coalesce(hb.k_energy_share, 0)) as k_energy_share,
    avg(hb.q_energy) as q_energy,
    avg(hb.k_energy) as k_energy,
    avg(hb.logit_mean) as logit_mean
from grid as g
join models as m using (model_id)
left join head_band as hb using (model_id, layer, q_head, band)
group by g.model_id, m.label, m.family, g.band
