-- Head-level metrics averaged per model and tenth of relative layer depth (the depth heatmaps and
-- the gap-by-depth line of the report; docs/metrics/aggregation.md): one row per model, metric
-- of var('depth_profile_metrics') and depth bin holding at least one head with a value.  Depth
-- bin k holds the layers with layer / (num_layers - 1) in [k/10, (k+1)/10) (bin 9 also holds the
-- last layer); models with one layer have no depth and no rows.  The mean runs over a list in
-- (layer, q_head) order, so it is bit-reproducible whatever DuckDB's threads do.
{%- set metrics = var('depth_profile_metrics') %}
with heads as (
    select
        model_id,
        layer,
        q_head,
        depth_bin,
        {%- for m in metrics %}
        cast({{ m }} as double) as {{ m }}{{ ',' if not loop.last }}
        {%- endfor %}
    from {{ ref('head_metrics') }}
    where depth_bin is not null
),

long as (
    unpivot heads
    on {% for m in metrics %}{{ m }}{{ ', ' if not loop.last }}{% endfor %}
    into name metric value value
)

select
    model_id,
    metric,
    depth_bin,
    depth_bin / 10.0 as depth_low,
    (depth_bin + 1) / 10.0 as depth_high,
    (depth_bin + 0.5) / 10.0 as depth_mid,
    count(*) as n_heads,
    min(layer) as first_layer,
    max(layer) as last_layer,
    list_sum(list(value order by layer, q_head)) / count(*) as mean_value
from long
where isfinite(value)
group by model_id, metric, depth_bin
-- a stable row order for readers that select without ORDER BY
order by model_id, metric, depth_bin
