{#
  Ordinary least-squares line y = intercept + slope * x over the (x, y) pairs of a group, from
  lists XS and YS in a fixed order (so sums are bit-reproducible whatever DuckDB's threads do).
  Yields "expr as name" select items: n, slope, intercept, x_min, x_max and the line's value at
  both ends (y_at_x_min, y_at_x_max).  Slope and intercept are NULL below 2 pairs or when x is
  constant, by the rule of qkwh/analyses/correlation.py: a variance counts as zero when it is
  <= (1e-12)^2 x the mean square of the raw values.
  A group's lists must hold finite values only.
  XM and YM name columns that hold the means (select items of macro ols_means over the same
  lists, in a relation before): a mean written inside a lambda would be recomputed for every
  element of the list, which makes the line quadratic in the group's size.
#}
{% macro ols_line(xs, ys, prefix='', xm='ols_x_mean', ym='ols_y_mean') -%}
    {%- set n = 'len(' ~ xs ~ ')' -%}
    {%- set dx = 'list_transform(' ~ xs ~ ', lambda v: v - ' ~ xm ~ ')' -%}
    {%- set dy = 'list_transform(' ~ ys ~ ', lambda v: v - ' ~ ym ~ ')' -%}
    {%- set sxx = 'list_dot_product(' ~ dx ~ ', ' ~ dx ~ ')' -%}
    {%- set sxy = 'list_dot_product(' ~ dx ~ ', ' ~ dy ~ ')' -%}
    {%- set ok = n ~ ' >= 2 and ' ~ sxx ~ ' > 1e-24 * list_dot_product(' ~ xs ~ ', ' ~ xs ~ ')' -%}
    {%- set slope = '(' ~ sxy ~ ' / ' ~ sxx ~ ')' -%}
    {%- set intercept = '(' ~ ym ~ ' - ' ~ slope ~ ' * ' ~ xm ~ ')' -%}
    {{ n }} as {{ prefix }}n,
    case when {{ ok }} then {{ slope }} end as {{ prefix }}slope,
    case when {{ ok }} then {{ intercept }} end as {{ prefix }}intercept,
    list_min({{ xs }}) as {{ prefix }}x_min,
    list_max({{ xs }}) as {{ prefix }}x_max,
    case when {{ ok }} then {{ intercept }} + {{ slope }} * list_min({{ xs }}) end as {{ prefix }}y_at_x_min,
    case when {{ ok }} then {{ intercept }} + {{ slope }} * list_max({{ xs }}) end as {{ prefix }}y_at_x_max
{%- endmacro %}

{#
  The means of lists XS and YS as select items ols_x_mean and ols_y_mean (the columns
  ols_line reads): list_sum / len, the expression ols_line used inline before.
#}
{% macro ols_means(xs, ys) -%}
    (list_sum({{ xs }}) / len({{ xs }})) as ols_x_mean,
    (list_sum({{ ys }}) / len({{ xs }})) as ols_y_mean
{%- endmacro %}
