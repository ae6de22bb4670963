{#
  Every column check of one table in a single scan, so that a table with twenty checked columns
  costs dbt one test, not twenty.  Arguments (all optional):

    not_null:        [col, ...]                  no NULL in the column
    in_range:        {col: [min, max], ...}      every non-null value is finite and lies in
                                                 [min, max] (either bound may be null: open), up
                                                 to `tolerance` for floating-point rounding
    accepted_values: {col: [value, ...], ...}    every non-null value is one of these (strings are
                                                 quoted, numbers are not)
    expressions:     ["sql", ...]                a boolean expression over the row holds on every
                                                 row (NULL counts as a pass)

  Returns one row per check that fails: the check, e.g. `in_range(depth, 0, 1)`, and how many
  rows fail it (`qkwh build` prints them).  The test fails when any row comes back.
#}
{% test column_checks(model, not_null=[], in_range={}, accepted_values={}, expressions=[], tolerance=1e-12) %}
{%- set checks = [] -%}
{%- for c in not_null -%}
  {%- do checks.append(("not_null(" ~ c ~ ")", c ~ " is null")) -%}
{%- endfor -%}
{%- for c, bounds in in_range.items() -%}
  {%- set lo, hi = bounds[0], bounds[1] -%}
  {%- set cond = c ~ " is not null and (not isfinite(" ~ c ~ ")"
        ~ ((" or " ~ c ~ " < " ~ lo ~ " - " ~ tolerance) if lo is not none else "")
        ~ ((" or " ~ c ~ " > " ~ hi ~ " + " ~ tolerance) if hi is not none else "") ~ ")" -%}
  {%- do checks.append(("in_range(" ~ c ~ ", " ~ lo ~ ", " ~ hi ~ ")", cond)) -%}
{%- endfor -%}
{%- for c, values in accepted_values.items() -%}
  {%- set literals = [] -%}
  {%- for v in values -%}
    {%- do literals.append(("'" ~ (v | replace("'", "''")) ~ "'") if v is string else (v | string)) -%}
  {%- endfor -%}
  {%- do checks.append(("accepted_values(" ~ c ~ ")", c ~ " not in (" ~ literals | join(", ") ~ ")")) -%}
{%- endfor -%}
{%- for e in expressions -%}
  {%- do checks.append((e, "not coalesce((" ~ e ~ "), true)")) -%}
{%- endfor -%}
{%- if not checks -%}
  {{ exceptions.raise_compiler_error("column_checks on " ~ model ~ ": no check given") }}
{%- endif %}
with counts as (
    select
    {%- for name, cond in checks %}
        count_if({{ cond }}) as "{{ name | replace('"', '""') }}"{{ "," if not loop.last }}
    {%- endfor %}
    from {{ model }}
)
select check_name, failing_rows
from (unpivot counts on columns(*) into name check_name value failing_rows)
where failing_rows > 0
{% endtest %}
