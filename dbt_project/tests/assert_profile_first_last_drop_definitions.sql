-- spec §2.3.8 / I-26 on every row of plasticity_profile (model and head scope) and of
-- model_summary: ap_first_20pct = mean(d0, d1), ap_last_20pct = mean(d8, d9),
-- ap_drop = first - last, quintile_k = mean(d_2k, d_2k+1).
{%- set checks = [
    ('ap_first_20pct', '(decile_0 + decile_1) / 2'),
    ('ap_last_20pct', '(decile_8 + decile_9) / 2'),
    ('ap_drop', 'ap_first_20pct - ap_last_20pct'),
    ('quintile_0', '(decile_0 + decile_1) / 2'),
    ('quintile_1', '(decile_2 + decile_3) / 2'),
    ('quintile_2', '(decile_4 + decile_5) / 2'),
    ('quintile_3', '(decile_6 + decile_7) / 2'),
    ('quintile_4', '(decile_8 + decile_9) / 2'),
] %}
{%- for rel in ['plasticity_profile', 'model_summary'] %}
{%- set outer = loop %}
{%- for col, expr in checks %}
select '{{ rel }}' as relation, model_id, '{{ col }}' as metric, {{ col }} as actual, {{ expr }} as expected
from {{ ref(rel) }}
where ({{ col }} is null) <> (({{ expr }}) is null)
   or abs({{ col }} - ({{ expr }})) > 1e-12
{{ 'union all' if not (outer.last and loop.last) }}
{%- endfor %}
{%- endfor %}
