-- The energy spectrum of each model (docs/metrics/rope.md): per RoPE plane (and frequency: models
-- whose layer types rotate with different frequencies get a row per frequency) the mean over
-- heads of the plane's share of the query and key energy, against its wavelength.
with planes as (
    select p.*
    from {{ ref('stg_rope_planes') }} as p
    where p.model_id in (select model_id from {{ ref('int_models') }})
),

models as (
    select model_id, family, label from {{ ref('int_models') }}
)

select
    p.model_id,
    m.label,
    m.family,
    p.band,
    {{ rope_band_order('p.band') }} as band_order,
    p.plane,
    p.dim_a,
    p.dim_b,
    p.inv_freq,
    any_value(p.wavelength) as wavelength,
    count(*) as n_heads,
    count(distinct p.layer) as n_layers,
    avg(p.q_energy_share) as q_energy_share,
    avg(p.k_energy_share) as k_energy_share,
    avg(p.q_energy) as q_energy,
    avg(p.k_energy) as k_energy,
    avg(p.logit_mean) as logit_mean
from planes as p
join models as m using (model_id)
group by p.model_id, m.label, m.family, p.band, p.plane, p.dim_a, p.dim_b, p.inv_freq
-- a stable row order for readers that select without ORDER BY
order by model_id, {{ rope_band_order('band') }}, plane, dim_a, inv_freq
