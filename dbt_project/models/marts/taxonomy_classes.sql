-- The head classes (docs/metrics/pca.md#head-taxonomy) in display order, with their rule, label
-- and colour (var taxonomy_classes, the one list of them), next to the thresholds this build
-- used (vars taxonomy_high / taxonomy_low, which `--vars` may override): what a figure needs to
-- draw the classes and the threshold lines without knowing either.
{%- set classes = var('taxonomy_classes') %}
with classes as (
    select * from (values
        {%- for c in classes %}
        ({{ loop.index }}, {{ sql_string(c['taxonomy']) }}, {{ sql_string(c['label']) }},
         {{ sql_string(c['color']) }}, {{ sql_string(c['rule']) }}){{ ',' if not loop.last }}
        {%- endfor %}
    ) as t(class_order, taxonomy, label, color, rule)
)

select
    taxonomy,
    cast(class_order as integer) as class_order,
    label,
    color,
    rule,
    cast({{ var('taxonomy_high') }} as double) as taxonomy_high,
    cast({{ var('taxonomy_low') }} as double) as taxonomy_low
from classes
-- a stable row order for readers that select without ORDER BY
order by class_order
