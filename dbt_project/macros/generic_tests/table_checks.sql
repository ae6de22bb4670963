{#
  Every check of one table in one query and one dbt node, so that a table with a key, two
  references and twenty checked columns costs dbt one test, not twenty-three (dbt spends tens of
  milliseconds of Python on every test node, whatever its SQL).  Arguments, all optional:

    primary_key:        [col, ...]            the columns form the table's key: no NULL in any of
                                              them and no two rows with the same combination
    unique_combination: [col, ...]            no two rows with the same combination (NULLs equal)
    unique:             [col, ...]            no two rows with the same non-null value
    relationships:      {col: {to: "ref('parent')", field: parent_col}, ...}
                                              every non-null value is one of the parent's (a
                                              list of such {to, field} for several parents)
    not_null:           [col, ...]            no NULL in the column
    in_range:           {col: [min, max], ...}
                                              every non-null value is finite and lies in
                                              [min, max] (a null bound is open), up to
                                              `tolerance` for floating-point rounding
    accepted_values:    {col: [value, ...], ...}
                                              every non-null value is one of these (strings are
                                              quoted, numbers are not)
    expressions:        ["sql", ...]          a boolean expression over the row holds on every
                                              row (NULL counts as a pass)

  Returns one row per check that fails: the check, e.g. `in_range(depth, 0, 1)`, and the number
  of rows that fail it (a primary key is two checks: `... is null`, rows with a NULL in the key,
  and `... is shared`, rows whose key another row has too).  The test fails when
  any row comes back; `qkwh build` prints them.
#}
{% test table_checks(model, primary_key=none, unique_combination=none, unique=[], relationships={}, not_null=[], in_range={}, accepted_values={}, expressions=[], tolerance=1e-12) %}
{#- checks counted in one scan of the table -#}
{%- set row_checks = [] -%}
{%- for c in not_null -%}
  {%- do row_checks.append(("not_null(" ~ c ~ ")", c ~ " is null")) -%}
{%- endfor -%}
{%- for c, bounds in in_range.items() -%}
  {%- set lo, hi = bounds[0], bounds[1] -%}
  {%- set cond = c ~ " is not null and (not isfinite(" ~ c ~ ")"
        ~ ((" or " ~ c ~ " < " ~ lo ~ " - " ~ tolerance) if lo is not none else "")
        ~ ((" or " ~ c ~ " > " ~ hi ~ " + " ~ tolerance) if hi is not none else "") ~ ")" -%}
  {%- do row_checks.append(("in_range(" ~ c ~ ", " ~ lo ~ ", " ~ hi ~ ")", cond)) -%}
{%- endfor -%}
{%- for c, values in accepted_values.items() -%}
  {%- set literals = [] -%}
  {%- for v in values -%}
    {%- do literals.append(("'" ~ (v | replace("'", "''")) ~ "'") if v is string else (v | string)) -%}
  {%- endfor -%}
  {%- do row_checks.append(("accepted_values(" ~ c ~ ")", c ~ " not in (" ~ literals | join(", ") ~ ")")) -%}
{%- endfor -%}
{%- for e in expressions -%}
  {%- do row_checks.append((e, "not coalesce((" ~ e ~ "), true)")) -%}
{%- endfor -%}
{#- checks that need a query of their own: the failing rows they count -#}
{%- set set_checks = [] -%}
{%- if primary_key -%}
  {%- set nulls = [] -%}
  {%- for c in primary_key -%}{%- do nulls.append(c ~ " is null") -%}{%- endfor -%}
  {%- do row_checks.append(("primary_key(" ~ primary_key | join(", ") ~ ") is null", nulls | join(" or "))) -%}
  {%- do set_checks.append(("primary_key(" ~ primary_key | join(", ") ~ ") is shared", table_checks_shared_rows(model, primary_key))) -%}
{%- endif -%}
{%- if unique_combination -%}
  {%- do set_checks.append(("unique_combination(" ~ unique_combination | join(", ") ~ ")",
        table_checks_shared_rows(model, unique_combination))) -%}
{%- endif -%}
{%- for c in unique -%}
  {%- do set_checks.append(("unique(" ~ c ~ ")",
        "select sum(n) from (select count(*) as n from " ~ model ~ " where " ~ c
        ~ " is not null group by " ~ c ~ " having count(*) > 1)")) -%}
{%- endfor -%}
{%- for c, refs in relationships.items() -%}
  {%- for ref_ in ([refs] if refs is mapping else refs) -%}
    {%- do set_checks.append(("relationships(" ~ c ~ " -> " ~ ref_.to.identifier ~ "." ~ ref_.field ~ ")",
          "select count(*) from " ~ model ~ " as child where child." ~ c ~ " is not null and not exists "
          ~ "(select 1 from " ~ ref_.to ~ " as parent where parent." ~ ref_.field ~ " = child." ~ c ~ ")")) -%}
  {%- endfor -%}
{%- endfor -%}
{%- if not (row_checks or set_checks) -%}
  {{ exceptions.raise_compiler_error("table_checks on " ~ model ~ ": no check given") }}
{%- endif %}
with scan as (
    select
    {%- for name, cond in row_checks %}
        count_if({{ cond }}) as "{{ name | replace('"', '""') }}",
    {%- endfor %}
        count(*) as "__table_checks_none__"  {#- an aggregate: one row, whatever the checks #}
    from {{ model }}
),
counts as (
    select
    {%- for name, sql in set_checks %}
        coalesce(({{ sql }}), 0) as "{{ name | replace('"', '""') }}",
    {%- endfor %}
        scan.*
    from scan
)
select check_name, failing_rows
from (unpivot counts on columns(* exclude ("__table_checks_none__")) into name check_name value failing_rows)
where failing_rows > 0
{% endtest %}

{#
  SQL counting the rows of `model` whose combination of `cols` another row has too.  The exact
  grouping runs only over the rows whose hash of the key is shared (a hash collision costs time,
  never a wrong answer): a third of the time of grouping every row, on a table of millions.
#}
{% macro table_checks_shared_rows(model, cols) -%}
select sum(n) from (select count(*) as n from {{ model }}
where hash({{ cols | join(", ") }}) in (select h from (select hash({{ cols | join(", ") }}) as h from {{ model }}) group by h having count(*) > 1)
group by {{ cols | join(", ") }} having count(*) > 1)
{%- endmacro %}
