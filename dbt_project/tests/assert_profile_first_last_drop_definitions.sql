-- The profile definitions of docs/metrics/aggregation.md on every row of head_metrics (one head) and of model_summary (model
-- deciles), for both estimators: ap_first_20pct = mean(d0, d1), ap_last_20pct = mean(d8, d9),
-- ap_drop = first - last, quintile_k = mean(d_2k, d_2k+1) (head_metrics), and the gaps.
{%- set checks = [] %}
{%- for e in plasticity_estimators() %}
{%- set s = e.suffix %}
{%- do checks.append(('ap_first_20pct' ~ s, '(decile_0' ~ s ~ ' + decile_1' ~ s ~ ') / 2', true)) %}
{%- do checks.append(('ap_last_20pct' ~ s, '(decile_8' ~ s ~ ' + decile_9' ~ s ~ ') / 2', true)) %}
{%- do checks.append(('ap_drop' ~ s, 'ap_first_20pct' ~ s ~ ' - ap_last_20pct' ~ s, true)) %}
{%- for k in range(5) %}
{%- do checks.append(('quintile_' ~ k ~ s, '(decile_' ~ (2 * k) ~ s ~ ' + decile_' ~ (2 * k + 1) ~ s ~ ') / 2', false)) %}
{%- endfor %}
{%- endfor %}
{%- do checks.append(('gauss_gap', 'ap_overall - ap_overall_empirical', true)) %}
{%- do checks.append(('gauss_gap_drop', 'ap_drop - ap_drop_empirical', true)) %}
{%- set rows = [] %}
{%- for col, expr, in_summary in checks %}
{%- do rows.append(('head_metrics', col, expr)) %}
{%- if in_summary %}{% do rows.append(('model_summary', col, expr)) %}{% endif %}
{%- endfor %}
{%- for rel, col, expr in rows %}
select '{{ rel }}' as relation, model_id, '{{ col }}' as metric, {{ col }} as actual, {{ expr }} as expected
from {{ ref(rel) }}
where ({{ col }} is null) <> (({{ expr }}) is null)
   or abs({{ col }} - ({{ expr }})) > 1e-12
{{ 'union all' if not loop.last }}
{%- endfor %}
